package cri

import (
	"context"
	"fmt"
	"sync"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodName is a pod's namespace and name.
type PodName struct {
	Namespace, Name string
}

// PodNamer names pods by UID from the runtime's pod sandboxes
// (ListPodSandbox metadata), cached: the runtime is asked again only when
// a UID is not known.
type PodNamer struct {
	client runtimeapi.RuntimeServiceClient

	mu    sync.Mutex
	names map[string]PodName
}

// NewPodNamer returns a namer over the runtime's pod sandboxes.
func NewPodNamer(client runtimeapi.RuntimeServiceClient) *PodNamer {
	return &PodNamer{client: client, names: map[string]PodName{}}
}

// Names returns the names of the pods with the given UIDs that the runtime
// knows. The error says why the runtime could not be asked; the names
// known from the cache are returned with it.
func (n *PodNamer) Names(ctx context.Context, uids []string) (map[string]PodName, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	missing := false
	for _, u := range uids {
		if _, ok := n.names[u]; !ok {
			missing = true
			break
		}
	}
	var err error
	if missing {
		var resp *runtimeapi.ListPodSandboxResponse
		resp, err = n.client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			err = fmt.Errorf("list pod sandboxes: %w", err)
		} else {
			names := make(map[string]PodName, len(resp.Items))
			for _, s := range resp.Items {
				if md := s.GetMetadata(); md != nil && md.Uid != "" {
					names[md.Uid] = PodName{Namespace: md.Namespace, Name: md.Name}
				}
			}
			n.names = names
		}
	}
	out := make(map[string]PodName, len(uids))
	for _, u := range uids {
		if v, ok := n.names[u]; ok {
			out[u] = v
		}
	}
	return out, err
}
