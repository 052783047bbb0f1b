package bpf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/kernel"
)

// The nodeshim features that these programs serve, as the report names them.
const (
	neededByRecorder = "nodeshim: seccomp record (syscall recorder)"
	neededByOOM      = "nodeshim: OOM watcher (MemoryPressure reasons, OOM kill metric)"
)

// Requirements returns what the syscall recorder and the OOM watcher need
// from the kernel, each with a probe, for `nodeshim report`. The feature
// probes go through cilium/ebpf's features package (they load tiny
// programs and create tiny maps); the last two load the real programs.
//
// The two program loads share one decoded copy of the kernel BTF (about
// 35-50 ms of CPU to decode here), held for as long as the returned
// requirements are.
func Requirements() []kernel.Requirement {
	cache := btf.NewCache()
	tracing := sync.OnceValue(func() error { return haveTracing(cache) })
	return []kernel.Requirement{
		{
			ID: "ebpf.btf-vmlinux", Group: "ebpf", MinKernel: kernel.V(5, 4, 0),
			NeededBy: []string{neededByRecorder + ", CO-RE relocations", neededByOOM + ", CO-RE relocations"},
			Probe:    probeVmlinuxBTF,
		},
		{
			ID: "ebpf.prog-raw-tracepoint", Group: "ebpf", MinKernel: kernel.V(4, 17, 0),
			NeededBy: []string{neededByRecorder + " on raw_syscalls/sys_enter"},
			Probe:    featureProbe(func() error { return features.HaveProgramType(ebpf.RawTracepoint) }, "BPF_PROG_TYPE_RAW_TRACEPOINT"),
		},
		{
			ID: "ebpf.map-percpu-array", Group: "ebpf", MinKernel: kernel.V(4, 6, 0),
			NeededBy: []string{neededByRecorder + ", per-syscall counters"},
			Probe:    featureProbe(func() error { return features.HaveMapType(ebpf.PerCPUArray) }, "BPF_MAP_TYPE_PERCPU_ARRAY"),
		},
		{
			ID: "ebpf.helper-ancestor-cgroup-id", Group: "ebpf",
			NeededBy: []string{neededByRecorder + " --cgroup and -- CMD (cgroup v2 subtree targets)"},
			Probe: featureProbe(func() error {
				return features.HaveProgramHelper(ebpf.RawTracepoint, asm.FnGetCurrentAncestorCgroupId)
			}, "bpf_get_current_ancestor_cgroup_id in raw tracepoint programs"),
		},
		{
			ID: "ebpf.map-ringbuf", Group: "ebpf", MinKernel: kernel.V(5, 8, 0),
			NeededBy: []string{neededByOOM + " (else it falls back to a perf buffer)"},
			Probe:    probeRingbuf,
		},
		{
			ID: "ebpf.prog-tracing", Group: "ebpf", MinKernel: kernel.V(5, 5, 0),
			NeededBy: []string{neededByOOM + ": fentry on mark_oom_victim, which sees the victim's cgroup"},
			Probe:    featureProbe(tracing, "BPF_PROG_TYPE_TRACING (fentry on bpf_init)"),
			// Decodes the kernel BTF that the two program loads share.
			Slow: true,
		},
		{
			ID: "ebpf.tracefs-oom-mark-victim", Group: "ebpf",
			NeededBy: []string{neededByOOM + ": the oom/mark_victim tracepoint fallback"},
			Probe:    probeTracefsEvent("oom", "mark_victim"),
		},
		{
			ID: "ebpf.syscall-recorder", Group: "ebpf",
			NeededBy: []string{neededByRecorder},
			Probe:    recorderProbe(cache),
			Slow:     true,
		},
		{
			ID: "ebpf.oom-watcher", Group: "ebpf",
			NeededBy: []string{neededByOOM},
			Probe:    oomWatcherProbe(cache, tracing),
			// Detaching a perf-event tracepoint waits for an RCU grace
			// period: 30-60 ms of wall time here.
			Slow: true,
		},
	}
}

// featureProbe turns a cilium/ebpf feature check into a probe: nil is
// Supported, ebpf.ErrNotSupported is Unsupported, any other error Unknown.
func featureProbe(check func() error, what string) func(context.Context, *kernel.Host) kernel.Finding {
	return func(context.Context, *kernel.Host) kernel.Finding {
		err := check()
		switch {
		case err == nil:
			return kernel.Findingf(kernel.Supported, "%s: the kernel accepts it", what)
		case errors.Is(err, ebpf.ErrNotSupported):
			return kernel.Findingf(kernel.Unsupported, "%s: %v", what, err)
		case errors.Is(err, unix.EPERM) && os.Geteuid() == 0:
			// Root with CAP_BPF and CAP_PERFMON is refused: the kernel
			// (lockdown, an LSM, a missing trampoline) will not run it.
			return kernel.Findingf(kernel.Unsupported, "%s: refused to root: %v", what, err)
		}
		return kernel.Findingf(kernel.Unknown, "%s: probe failed: %v", what, err)
	}
}

func probeVmlinuxBTF(_ context.Context, h *kernel.Host) kernel.Finding {
	p := h.Path("/sys/kernel/btf/vmlinux")
	fi, err := os.Stat(p)
	switch {
	case err == nil:
		return kernel.Findingf(kernel.Supported, "%s: %d bytes", p, fi.Size())
	case errors.Is(err, os.ErrNotExist):
		return kernel.Findingf(kernel.Unsupported, "%s is missing (CONFIG_DEBUG_INFO_BTF=n)", p)
	}
	return kernel.Findingf(kernel.Unknown, "stat %s: %v", p, err)
}

func probeRingbuf(_ context.Context, _ *kernel.Host) kernel.Finding {
	err := features.HaveMapType(ebpf.RingBuf)
	switch {
	case err == nil:
		return kernel.Findingf(kernel.Supported, "BPF_MAP_TYPE_RINGBUF: the kernel accepts it")
	case errors.Is(err, ebpf.ErrNotSupported):
		return kernel.Findingf(kernel.Degraded, "BPF_MAP_TYPE_RINGBUF: %v; OOM events use a perf buffer", err)
	}
	return kernel.Findingf(kernel.Unknown, "BPF_MAP_TYPE_RINGBUF: probe failed: %v", err)
}

// tracefsRoots are where tracefs is found, in the order the kernel
// documents (Documentation/trace/ftrace.rst).
func tracefsRoots(h *kernel.Host) []string {
	return []string{h.Path("/sys/kernel/tracing"), h.Path("/sys/kernel/debug/tracing")}
}

func probeTracefsEvent(group, event string) func(context.Context, *kernel.Host) kernel.Finding {
	return func(_ context.Context, h *kernel.Host) kernel.Finding {
		roots := tracefsRoots(h)
		for _, r := range roots {
			p := r + "/events/" + group + "/" + event + "/id"
			if _, err := os.Stat(p); err == nil {
				return kernel.Findingf(kernel.Supported, "%s exists", p)
			}
		}
		for _, r := range roots {
			if _, err := os.Stat(r + "/events"); err == nil {
				return kernel.Findingf(kernel.Unsupported, "tracefs at %s has no %s/%s event", r, group, event)
			}
		}
		return kernel.Findingf(kernel.Unknown, "tracefs is not mounted at %s (mount -t tracefs nodev /sys/kernel/tracing)",
			strings.Join(roots, " or "))
	}
}

// recorderProbe loads and attaches the real recorder for the probing
// process and detaches it again.
func recorderProbe(cache *btf.Cache) func(context.Context, *kernel.Host) kernel.Finding {
	return func(context.Context, *kernel.Host) kernel.Finding {
		r, err := newRecorder(ProcessTreeTarget(uint32(os.Getpid())), cache)
		if err != nil {
			return loadFinding("syscall recorder", err)
		}
		if err := r.Close(); err != nil {
			return kernel.Findingf(kernel.Unknown, "syscall recorder loaded but did not detach: %v", err)
		}
		return kernel.Findingf(kernel.Supported, "syscall recorder loaded, attached to raw_syscalls/sys_enter and detached")
	}
}

// oomWatcherProbe attaches the real OOM watcher and reports which hook it
// got: fentry is Supported, a fallback Degraded (the kprobe lacks nothing
// but costs more; the tracepoint loses the victim's cgroup). Hooks that the
// cheap feature probes of hookAvailable rule out are not loaded at all (a
// failed load costs as much as a good one); the evidence says why each was
// passed over. The remaining hooks are tried in order, as `nodeshim serve`
// tries them, so a hook that looks available but fails still falls back.
func oomWatcherProbe(cache *btf.Cache, tracing func() error) func(context.Context, *kernel.Host) kernel.Finding {
	return func(_ context.Context, h *kernel.Host) kernel.Finding {
		var hooks []OOMHook
		var skipped []string
		for _, hook := range DefaultOOMHooks() {
			if ok, why := hookAvailableWith(h, hook, tracing); ok {
				hooks = append(hooks, hook)
			} else {
				skipped = append(skipped, fmt.Sprintf("%s skipped: %s", hook, why))
			}
		}
		if len(hooks) == 0 {
			return kernel.Findingf(kernel.Unsupported, "OOM watcher: no hook available: %s", strings.Join(skipped, "; "))
		}
		w, err := WatchOOM(OOMOptions{Hooks: hooks, BTFCache: cache})
		if err != nil {
			if len(skipped) > 0 {
				err = fmt.Errorf("%w; %s", err, strings.Join(skipped, "; "))
			}
			return loadFinding("OOM watcher", err)
		}
		hook, tr := w.Hook(), w.Transport()
		if err := w.Close(); err != nil {
			return kernel.Findingf(kernel.Unknown, "OOM watcher attached to %s but did not detach: %v", hook, err)
		}
		if hook == OOMHookFentry {
			return kernel.Findingf(kernel.Supported, "OOM watcher attached to %s over %s", hook, tr)
		}
		why := "fentry unavailable"
		if len(skipped) > 0 {
			why = strings.Join(skipped, "; ")
		}
		return kernel.Findingf(kernel.Degraded, "OOM watcher fell back to %s over %s (%s)", hook, tr, why)
	}
}

// hookAvailableWith reports whether this kernel should accept hook, from
// cheap feature probes: BPF_PROG_TYPE_TRACING through tracing (the report
// shares one check with ebpf.prog-tracing), the kprobe PMU or kprobe_events,
// the oom/mark_victim tracepoint in tracefs.
func hookAvailableWith(h *kernel.Host, hook OOMHook, tracing func() error) (bool, string) {
	switch hook {
	case OOMHookFentry:
		err := tracing()
		if err == nil {
			return true, "BPF_PROG_TYPE_TRACING accepted"
		}
		return false, fmt.Sprintf("BPF_PROG_TYPE_TRACING: %v", err)
	case OOMHookKprobe:
		// perf_kprobe PMU (4.17+) or kprobe_events in tracefs; both
		// need CONFIG_KPROBES. cilium/ebpf's link.Kprobe uses the same two.
		if _, err := os.Stat(h.Path("/sys/bus/event_source/devices/kprobe/type")); err == nil {
			return true, "kprobe PMU present"
		}
		for _, r := range tracefsRoots(h) {
			if _, err := os.Stat(r + "/kprobe_events"); err == nil {
				return true, r + "/kprobe_events present"
			}
		}
		return false, "no kprobe PMU and no kprobe_events (CONFIG_KPROBES=n?)"
	case OOMHookTracepoint:
		f := probeTracefsEvent("oom", "mark_victim")(context.Background(), h)
		return f.Verdict == kernel.Supported, f.Evidence
	}
	return false, "unknown hook"
}

// haveTracing is the check of features.HaveProgramType(ebpf.Tracing) (a
// minimal fentry program on bpf_init) loaded as a collection, so that it
// finds its attach target in the shared kernel BTF instead of decoding
// /sys/kernel/btf/vmlinux once more: the features package always decodes
// its own copy, which costs more than the check itself. Like the features
// package, EINVAL and E2BIG (a kernel that does not know the type) mean
// ebpf.ErrNotSupported.
func haveTracing(cache *btf.Cache) error {
	spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{
		"probe_fentry": {
			Type:       ebpf.Tracing,
			AttachType: ebpf.AttachTraceFEntry,
			AttachTo:   "bpf_init",
			License:    "GPL",
			Instructions: asm.Instructions{
				asm.LoadImm(asm.R0, 0, asm.DWord),
				asm.Return(),
			},
		},
	}}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
		Cache:    cache,
		Programs: ebpf.ProgramOptions{LogDisabled: true},
	})
	switch {
	case err == nil:
		coll.Close()
		return nil
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.E2BIG):
		return fmt.Errorf("load a BPF_PROG_TYPE_TRACING program: %w: %w", ebpf.ErrNotSupported, err)
	}
	return fmt.Errorf("load a BPF_PROG_TYPE_TRACING program: %w", err)
}

func loadFinding(what string, err error) kernel.Finding {
	if errors.Is(err, ebpf.ErrNotSupported) {
		return kernel.Findingf(kernel.Unsupported, "%s: %v", what, err)
	}
	// The first line only: a verifier log does not fit a report cell.
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return kernel.Findingf(kernel.Unsupported, "%s: %s", what, msg)
}
