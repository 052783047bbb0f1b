package pressure

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/shim/cri"
	"github.com/nodeshim/nodeshim/shim/status"
)

// DefaultPodInterval is how often the pods' cgroups are read.
const DefaultPodInterval = 10 * time.Second

// PodNames names pods by UID (cri.PodNamer).
type PodNames interface {
	Names(ctx context.Context, uids []string) (map[string]cri.PodName, error)
}

// FromPods converts a read of the kubepods tree into the document's
// per-pod view, naming the pods that names knows.
func FromPods(at time.Time, tree cgroup.PodTree, pods []cgroup.PodUsage, names map[string]cri.PodName) *status.PodPressures {
	out := &status.PodPressures{ObservedAt: at, Kubepods: tree.Kubepods, Driver: string(tree.Driver), Items: []status.PodPressure{}}
	for _, u := range pods {
		p := status.PodPressure{UID: u.UID, QOS: string(u.QOS), Cgroup: u.Cgroup, Containers: u.Containers,
			Memory: status.PodMemory{Source: u.Memory.Source}}
		if n, ok := names[u.UID]; ok {
			p.Namespace, p.Name = n.Namespace, n.Name
		}
		if m := u.Memory; m.Err != nil {
			p.Memory.Unknown = m.Err.Error()
		} else {
			p.Memory.UsageBytes, p.Memory.WorkingSetBytes, p.Memory.OOMKills = m.Usage, m.WorkingSet, m.OOMKills
			if !m.Limit.Unlimited {
				v := m.Limit.Value
				p.Memory.LimitBytes = &v
			}
		}
		for i, r := range cgroup.Resources {
			p.PSI = append(p.PSI, psiOf(r, u.Pressure[i]))
		}
		out.Items = append(out.Items, p)
	}
	return out
}

func psiOf(r cgroup.Resource, pr cgroup.Pressure) status.PSI {
	v := status.PSI{Resource: string(r)}
	if pr.Err != nil {
		v.Unknown = pr.Err.Error()
		return v
	}
	v.Some = psiLine(pr.PSI.Some)
	if pr.PSI.HasFull {
		f := psiLine(pr.PSI.Full)
		v.Full = &f
	}
	return v
}

// podReader reads the pods' cgroups every interval in its own goroutine,
// so that a long read (thousands of pods) never holds up the monitor's
// handling of a pressure event, and keeps the last view.
type podReader struct {
	roots    cgroup.PodRoots
	names    PodNames
	interval time.Duration
	reader   *cgroup.Reader
	mu       sync.Mutex
	last     *status.PodPressures
}

// run reads the pods every interval until ctx is done, then closes the
// files the reader keeps open.
func (p *podReader) run(ctx context.Context) {
	defer p.reader.Close()
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		v := p.read(ctx, time.Now())
		p.mu.Lock()
		p.last = v
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// view returns the last view, nil before the first read ends.
func (p *podReader) view() *status.PodPressures {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// read reads the pods' cgroups and names them.
func (p *podReader) read(ctx context.Context, now time.Time) *status.PodPressures {
	tree, pods, err := cgroup.ReadPodUsage(p.roots, p.reader)
	if err != nil {
		return &status.PodPressures{ObservedAt: now, Unknown: err.Error(), Items: []status.PodPressure{}}
	}
	var names map[string]cri.PodName
	if p.names != nil {
		uids := make([]string, 0, len(pods))
		for _, u := range pods {
			uids = append(uids, u.UID)
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		names, _ = p.names.Names(rctx, uids)
		cancel()
	}
	return FromPods(now, tree, pods, names)
}

// podRoots finds the hierarchies that hold the pods' cgroups.
func podRoots(procRoot, cg2, parent string) (cgroup.PodRoots, error) {
	if parent == "" {
		parent = "/"
	}
	r := cgroup.PodRoots{V2: cg2, Parent: parent}
	switch p, err := cgroup.FindV1Mount(procRoot, "memory"); {
	case err == nil:
		r.MemoryV1 = p
	case !errors.Is(err, cgroup.ErrNoV1Hierarchy):
		return cgroup.PodRoots{}, fmt.Errorf("find the memory hierarchy: %w", err)
	}
	return r, nil
}
