// Package cri resolves a Kubernetes container (namespace, pod, container)
// to the process that runs it, through the node's CRI runtime
// (ListContainers by kubelet's labels, then ContainerStatus with verbose
// info for the pid and the OCI spec), or directly from a pid for the command line.
package cri

import (
	"github.com/nodeshim/nodeshim/internal/ref"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nodeshim/nodeshim/internal/errdefs"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Labels kubelet puts on every container it creates
// (pkg/kubelet/types/labels.go).
const (
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelPodName       = "io.kubernetes.pod.name"
	LabelContainerName = "io.kubernetes.container.name"
)

// ErrNotFound says that no running container matches: an unknown
// namespace, pod or container (kubelet answers 404 for it).
var ErrNotFound = errdefs.New(errdefs.ErrNotFound, "container not found")

// Target names a container the way kubelet's API does: nodeshim's one
// container reference, ref.Container.
type Target = ref.Container

// Process is a resolved container.
type Process struct {
	// ContainerID is the runtime's id, empty for a local pid.
	ContainerID string
	// PodSandboxID is the runtime's pod sandbox id, empty for a local pid.
	PodSandboxID string
	// PID is the container's init process in the host pid namespace.
	PID int
	// Spec is the container's OCI runtime spec from the runtime's verbose
	// info (containerd's "runtimeSpec"), nil when the runtime gives none.
	Spec *specs.Spec
	// Image and ImageRef name the container's image (ContainerStatus).
	Image, ImageRef string
	// Created is when the runtime created the container.
	Created time.Time
	// Status is the runtime's CRI status of the container, nil for a
	// local pid.
	Status *runtimeapi.ContainerStatus
}

// Resolver finds the process of a container.
type Resolver interface {
	Resolve(ctx context.Context, t Target) (Process, error)
}

// RuntimeResolver resolves through a CRI runtime service.
type RuntimeResolver struct {
	client runtimeapi.RuntimeServiceClient
	conn   *grpc.ClientConn
}

// Dial connects to the runtime's CRI socket, e.g.
// unix:///run/containerd/containerd.sock. The connection is made lazily by
// the first call.
func Dial(endpoint string) (*RuntimeResolver, error) {
	if !strings.HasPrefix(endpoint, "unix://") {
		endpoint = "unix://" + endpoint
	}
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial CRI runtime %s: %w", endpoint, err)
	}
	return &RuntimeResolver{client: runtimeapi.NewRuntimeServiceClient(conn), conn: conn}, nil
}

// Close closes a connection made by Dial.
func (r *RuntimeResolver) Close() error {
	if r.conn == nil {
		return nil
	}
	return r.conn.Close()
}

// Resolve finds the running container with kubelet's labels for t. When
// several match (a restart in progress), the most recently created one
// wins, as kubelet's checkpoint handler takes the current container.
func (r *RuntimeResolver) Resolve(ctx context.Context, t Target) (Process, error) {
	resp, err := r.client.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{
			LabelPodNamespace:  t.Namespace,
			LabelPodName:       t.Pod,
			LabelContainerName: t.Container,
		},
	}})
	if err != nil {
		return Process{}, fmt.Errorf("list containers for %s: %w", t, err)
	}
	var best *runtimeapi.Container
	for _, c := range resp.Containers {
		// Filters are advisory for some runtimes: check again.
		l := c.Labels
		if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING || l[LabelPodNamespace] != t.Namespace ||
			l[LabelPodName] != t.Pod || l[LabelContainerName] != t.Container {
			continue
		}
		if best == nil || c.CreatedAt > best.CreatedAt {
			best = c
		}
	}
	if best == nil {
		return Process{}, fmt.Errorf("%s: %w", t, ErrNotFound)
	}
	st, err := r.client.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: best.Id, Verbose: true})
	if err != nil {
		return Process{}, fmt.Errorf("container status of %s (%s): %w", t, best.Id, err)
	}
	pid, err := PIDFromVerboseInfo(st.Info)
	if err != nil {
		return Process{}, fmt.Errorf("container %s (%s): %w", t, best.Id, err)
	}
	spec, err := SpecFromVerboseInfo(st.Info)
	if err != nil {
		return Process{}, fmt.Errorf("container %s (%s): %w", t, best.Id, err)
	}
	p := Process{ContainerID: best.Id, PodSandboxID: best.PodSandboxId, PID: pid, Spec: spec}
	if s := st.GetStatus(); s != nil {
		p.Status = s
		p.Image, p.ImageRef = s.GetImage().GetImage(), s.GetImageRef()
		if ns := s.GetCreatedAt(); ns > 0 {
			p.Created = time.Unix(0, ns).UTC()
		}
	}
	return p, nil
}

// SpecFromVerboseInfo reads the container's OCI runtime spec from
// ContainerStatus verbose info: the "runtimeSpec" member of the "info"
// JSON object, as containerd returns it. It returns nil, nil when there is
// none (CRI-O keeps the spec out of the verbose info).
func SpecFromVerboseInfo(info map[string]string) (*specs.Spec, error) {
	raw, ok := info["info"]
	if !ok {
		return nil, nil
	}
	var v struct {
		Spec *specs.Spec `json:"runtimeSpec"`
	}
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return nil, fmt.Errorf("decode verbose info: %w", err)
	}
	return v.Spec, nil
}

// ErrNoPID is returned, wrapped, when the runtime's verbose info has no pid.
var ErrNoPID = errors.New("no pid in the runtime's verbose container info")

// PIDFromVerboseInfo reads the pid from ContainerStatus verbose info: the
// "info" key holds a JSON object with "pid", as containerd and CRI-O
// return it.
func PIDFromVerboseInfo(info map[string]string) (int, error) {
	raw, ok := info["info"]
	if !ok {
		return 0, fmt.Errorf("%w: no \"info\" key", ErrNoPID)
	}
	var v struct {
		PID *int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return 0, fmt.Errorf("decode verbose info: %w", err)
	}
	if v.PID == nil || *v.PID <= 0 {
		return 0, ErrNoPID
	}
	return *v.PID, nil
}
