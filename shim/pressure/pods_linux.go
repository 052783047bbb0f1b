package pressure

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nodeshim/nodeshim/bpf"
	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/runtimes/cri"
	"github.com/nodeshim/nodeshim/shim/status"
)

// DefaultPodInterval is the longest a read of the pods' cgroups is served
// for; they are read when a reader asks (status.Model.RefreshPods).
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

// podReader reads the pods' cgroups at most every interval and keeps the
// last view. It is safe for concurrent use: the API's readers call read,
// the monitor's evaluation calls cached, which never waits for a read.
type podReader struct {
	roots    cgroup.PodRoots
	names    PodNames
	interval time.Duration
	log      *slog.Logger

	// readMu serializes reads and guards reader, lastRead, closed,
	// openPass, pass, how, onHow and lastPassErr.
	readMu   sync.Mutex
	reader   *cgroup.Reader
	lastRead time.Time
	closed   bool
	// openPass, when set, loads the kernel pass at the first read, and is
	// cleared once it has been tried.
	openPass func() (*bpf.CgroupStats, error)
	pass     *bpf.CgroupStats
	how      string
	onHow    func(how string)
	// lastPassErr is the last pass failure logged, "" after a pass that
	// worked.
	lastPassErr string

	mu   sync.Mutex
	last *status.PodPressures
}

// cached returns the last view, nil before the first read.
func (p *podReader) cached() *status.PodPressures {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// close releases the files the reader keeps open and the kernel pass;
// later reads return the last view.
func (p *podReader) close() {
	p.readMu.Lock()
	defer p.readMu.Unlock()
	p.closed = true
	p.reader.Close()
	if p.pass != nil {
		p.pass.Close()
	}
}

// Ways of reading the pods' cgroups, for PressureMonitorReady.
const (
	howFiles   = "their cgroup2 files kept open and re-read with pread"
	howUntried = "by a BPF cgroup iterator in one kernel pass where it loads (at the first read), else " + howFiles
)

// setHow calls onHow with the way the pods are read now, and again when
// the first read settles it.
func (p *podReader) setHow(onHow func(how string)) {
	p.readMu.Lock()
	defer p.readMu.Unlock()
	p.onHow = onHow
	if p.how == "" {
		p.how = howFiles
		if p.openPass != nil {
			p.how = howUntried
		}
	}
	onHow(p.how)
}

// loadPass loads the kernel pass once, at the first read; p.readMu is held.
func (p *podReader) loadPass() {
	if p.openPass == nil {
		return
	}
	pass, err := p.openPass()
	p.openPass = nil
	if err != nil {
		p.how = howFiles + " (no kernel pass: " + err.Error() + ")"
		if p.log != nil {
			p.log.Warn("the kernel pass over the pods' cgroups did not load; their files are read", "err", err)
		}
	} else {
		p.pass = pass
		p.reader.SetPass(pass)
		p.how = pass.Describe() + ", memory.stat from its file kept open and re-read with pread"
	}
	if p.onHow != nil {
		p.onHow(p.how)
	}
}

// read returns the pods' view, read again when interval has passed.
func (p *podReader) read(ctx context.Context, now time.Time) *status.PodPressures {
	p.readMu.Lock()
	defer p.readMu.Unlock()
	if last := p.cached(); p.closed || last != nil && now.Sub(p.lastRead) < p.interval {
		return last
	}
	p.lastRead = now
	p.loadPass()
	v := p.readNow(ctx, now)
	p.mu.Lock()
	p.last = v
	p.mu.Unlock()
	return v
}

// readNow reads the pods' cgroups and names them.
func (p *podReader) readNow(ctx context.Context, now time.Time) *status.PodPressures {
	tree, pods, err := cgroup.ReadPodUsage(p.roots, p.reader)
	if err != nil {
		return &status.PodPressures{ObservedAt: now, Unknown: err.Error(), Items: []status.PodPressure{}}
	}
	// A pass that fails the same way at every read is logged once.
	if msg := errString(tree.PassErr); msg != p.lastPassErr {
		p.lastPassErr = msg
		if msg != "" && p.log != nil {
			p.log.Warn("the kernel pass over the pods' cgroups failed; their files were read", "err", tree.PassErr)
		}
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

// errString is err's message, "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
