// Package oom is the status model's source for OOM kills: it attaches the
// eBPF OOM watcher (package bpf), records every kill in the status
// document's bounded history with the victim's container by its Kubernetes
// names (resolved through CRI by a cri.CgroupIndex), and says in OOMWatcherReady whether kills are
// watched at all, and how or why not.
package oom

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nodeshim/nodeshim/bpf"
	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/runtimes/cri"
	"github.com/nodeshim/nodeshim/shim/status"
)

// Reasons of OOMWatcherReady.
const (
	ReasonAttached             = "Attached"
	ReasonNotSupportedByKernel = "NotSupportedByKernel"
	ReasonAttachFailed         = "AttachFailed"
	ReasonEventStreamEnded     = "EventStreamEnded"
)

// Name is the source's name in the status document.
const Name = "oom"

// Requirement is the OOM watcher's entry in the capability report.
const Requirement = "ebpf.oom-watcher"

// Containers finds the CRI container of an OOM victim (cri.CgroupIndex).
type Containers interface {
	Refresh(ctx context.Context) error
	Lookup(ctx context.Context, v cri.Victim) (cri.Workload, string, error)
}

// Source watches OOM kills until its context is done, then detaches.
type Source struct {
	// Hooks overrides the watcher's hooks (bpf.DefaultOOMHooks when nil).
	Hooks []bpf.OOMHook
	// Containers, when set, names each victim's container (namespace, pod,
	// container) in its record; ProcRoot is the host's procfs, read for
	// the victim's cgroups ("/proc" when empty).
	Containers Containers
	ProcRoot   string
	// RuntimeEndpoint is the node's CRI socket: when set and Containers is
	// nil, Run connects to it and resolves victims with a cri.CgroupIndex
	// over the cgroup mounts of ProcRoot/self/mountinfo.
	RuntimeEndpoint string
	// ResolveTimeout bounds the CRI calls of one lookup; 5 s when zero.
	ResolveTimeout time.Duration
	// ExitTimeout bounds the wait for the runtime to report a container
	// exited OOMKilled, for a victim whose task was gone by the event (a
	// kill that took its whole container); 30 s when zero. Victims are
	// named beside each other, so the wait holds no other kill back.
	ExitTimeout time.Duration
	// Logger receives one line per kill; slog.Default() when nil.
	Logger *slog.Logger
	// Verdict is the capability report's verdict on Requirement, when the
	// daemon collected a report: if the watcher cannot attach and the
	// report found the kernel unable to run it, OOMWatcherReady is False
	// (Warning) with the report's evidence rather than Unknown. The daemon
	// hands it over; the source reads nothing of the model but its own.
	Verdict *capability.Result
}

// Name returns "oom".
func (s *Source) Name() string { return Name }

// NotStarted is what the model shows before the source first reports.
func NotStarted() condition.Condition {
	return condition.Condition{Type: status.TypeOOMWatcher, Status: condition.Unknown, Reason: condition.ReasonNotStarted,
		Message: "the OOM watcher has not started"}
}

// Run attaches the watcher and records every OOM kill until ctx is done.
// When it cannot attach, OOMWatcherReady says why: False (Warning) when the
// capability report found the kernel unable to run it, Unknown otherwise;
// the document then says that kills are not watched instead of showing an
// empty, healthy-looking history, and Run returns nil (Done).
func (s *Source) Run(ctx context.Context, model *status.Model) error {
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	w, err := bpf.WatchOOM(bpf.OOMOptions{Hooks: s.Hooks})
	if err != nil {
		c := failure(s.Verdict, err)
		model.SetOOMWatch(false, "", c.Message)
		model.Set(c)
		log.Warn("OOM kills are not watched", "reason", c.Reason, "err", err)
		return nil
	}
	defer w.Close()
	containers := s.Containers
	if containers == nil && s.RuntimeEndpoint != "" {
		x, closeCRI, err := s.dialIndex()
		if err != nil {
			log.Warn("OOM victims' containers are not resolved", "err", err)
		} else {
			defer closeCRI()
			containers = x
		}
	}
	if containers != nil {
		// Take the containers' OOM counters as they are before any kill.
		rctx, cancel := context.WithTimeout(ctx, s.resolveTimeout())
		if err := containers.Refresh(rctx); err != nil {
			log.Warn("OOM victims' containers: first listing failed", "err", err)
		}
		cancel()
	}
	inflight := make(chan struct{}, maxLookups)
	var lookups sync.WaitGroup
	defer lookups.Wait()
	model.SetOOMWatch(true, string(w.Hook()), "")
	model.Set(condition.Condition{Type: status.TypeOOMWatcher, Status: condition.True, Reason: ReasonAttached,
		Message: fmt.Sprintf("attached to %s, events over %s", w.Hook(), w.Transport())})
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events():
			if !ok {
				err := w.Err()
				if err == nil {
					err = errors.New("the OOM event stream ended")
				}
				model.SetOOMWatch(false, string(w.Hook()), err.Error())
				model.Set(condition.Condition{Type: status.TypeOOMWatcher, Status: condition.Unknown, Reason: ReasonEventStreamEnded,
					Message: err.Error()})
				return err
			}
			k := status.OOMKill{Time: ev.Time, PID: ev.PID, TGID: ev.TGID, Comm: ev.Comm, CgroupID: ev.CgroupID,
				RSSBytes: ev.RSSBytes, TotalVMBytes: ev.TotalVMBytes, OOMScoreAdj: ev.OOMScoreAdj}
			// The victim's cgroups are read now, before the task is
			// reaped; naming its container may wait for the runtime (a
			// kill that took the whole container is named by its exit),
			// so it goes on beside the next events.
			v := s.victim(ev)
			select {
			case inflight <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
			lookups.Add(1)
			go func() {
				defer func() { <-inflight; lookups.Done() }()
				s.resolve(ctx, containers, v, &k)
				attrs := []any{"pid", ev.PID, "tgid", ev.TGID, "comm", ev.Comm, "cgroupID", ev.CgroupID, "rssBytes", ev.RSSBytes}
				if c := k.Container; c != nil {
					attrs = append(attrs, "namespace", c.Namespace, "pod", c.Pod, "container", c.Container, "containerID", c.ContainerID,
						"resolvedBy", c.ResolvedBy)
				} else if k.Unresolved != "" {
					attrs = append(attrs, "unresolved", k.Unresolved)
				}
				log.Warn("OOM kill", attrs...)
				model.AddOOMKill(k)
			}()
		}
	}
}

// maxLookups bounds the victims being named at once.
const maxLookups = 8

// dialIndex connects to RuntimeEndpoint and returns the index over it.
func (s *Source) dialIndex() (*cri.CgroupIndex, func(), error) {
	procRoot := s.procRoot()
	m, err := cgroup.FindMount(procRoot)
	if err != nil {
		return nil, nil, err
	}
	opts := cri.CgroupIndexOptions{CgroupV2: m.Path}
	switch p, err := cgroup.FindV1Mount(procRoot, "memory"); {
	case err == nil:
		opts.MemoryV1 = p
	case !errors.Is(err, cgroup.ErrNoV1Hierarchy):
		return nil, nil, err
	}
	r, err := cri.Dial(s.RuntimeEndpoint)
	if err != nil {
		return nil, nil, err
	}
	return cri.NewCgroupIndex(r.Client(), opts), func() { _ = r.Close() }, nil
}

func (s *Source) procRoot() string {
	if s.ProcRoot == "" {
		return "/proc"
	}
	return s.ProcRoot
}

func (s *Source) resolveTimeout() time.Duration {
	if s.ResolveTimeout > 0 {
		return s.ResolveTimeout
	}
	return 5 * time.Second
}

// victim is what the event and procfs tell of the task the kernel
// killed. Its cgroups are read from procfs at once, while the task may
// still be exiting: the kernel marks it before it dies, and its /proc
// entry lasts until it is reaped.
func (s *Source) victim(ev bpf.OOMEvent) cri.Victim {
	v := cri.Victim{CgroupID: ev.CgroupID, Time: ev.Time}
	// The kernel's names for its cgroups, read at the kill: they name a
	// container whose task and cgroup are gone by now (memory.oom.group).
	for _, name := range []string{ev.CgroupName, ev.CgroupParentName} {
		if name != "" {
			v.CgroupNames = append(v.CgroupNames, name)
		}
	}
	pid := ev.TGID
	if pid == 0 {
		pid = ev.PID
	}
	if pid != 0 {
		v.Cgroups, _ = cri.ProcCgroups(s.procRoot(), pid)
	}
	return v
}

// resolve names the victim's container in k, waiting for the runtime at
// most ExitTimeout (or the resolve time-out, if longer): a kill that took
// the whole container is named by the runtime's OOMKilled exit, which a
// loaded node may report seconds after the kill.
func (s *Source) resolve(ctx context.Context, containers Containers, v cri.Victim, k *status.OOMKill) {
	if containers == nil {
		return
	}
	// The lookup waits for an exit only for a victim that may be a
	// pod's (cri.CgroupIndex.Lookup); the others end sooner.
	wait := max(s.resolveTimeout(), s.exitTimeout())
	rctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	w, how, err := containers.Lookup(rctx, v)
	if err != nil {
		k.Unresolved = err.Error()
		return
	}
	k.Container = &status.OOMContainer{Namespace: w.Namespace, Pod: w.Pod, PodUID: w.PodUID, Container: w.Container,
		ContainerID: w.ContainerID, ResolvedBy: how}
}

func (s *Source) exitTimeout() time.Duration {
	if s.ExitTimeout > 0 {
		return s.ExitTimeout
	}
	return 30 * time.Second
}

// failure is OOMWatcherReady when the watcher could not attach.
func failure(verdict *capability.Result, err error) condition.Condition {
	if verdict != nil && verdict.Verdict == capability.Unsupported {
		return condition.Condition{Type: status.TypeOOMWatcher, Status: condition.False, Severity: condition.SeverityWarning,
			Reason: ReasonNotSupportedByKernel, Message: fmt.Sprintf("OOM kills are not watched: %s", verdict.Evidence)}
	}
	return condition.Condition{Type: status.TypeOOMWatcher, Status: condition.Unknown, Reason: ReasonAttachFailed,
		Message: fmt.Sprintf("OOM kills are not watched: %v", err)}
}
