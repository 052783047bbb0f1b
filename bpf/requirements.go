package bpf

import (
	"context"
	"errors"
	"os"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
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
func Requirements() []kernel.Requirement {
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
			Probe:    featureProbe(func() error { return features.HaveProgramType(ebpf.Tracing) }, "BPF_PROG_TYPE_TRACING"),
		},
		{
			ID: "ebpf.tracefs-oom-mark-victim", Group: "ebpf",
			NeededBy: []string{neededByOOM + ": the oom/mark_victim tracepoint fallback"},
			Probe:    probeTracefsEvent("oom", "mark_victim"),
		},
		{
			ID: "ebpf.syscall-recorder", Group: "ebpf",
			NeededBy: []string{neededByRecorder},
			Probe:    probeRecorder,
		},
		{
			ID: "ebpf.oom-watcher", Group: "ebpf",
			NeededBy: []string{neededByOOM},
			Probe:    probeOOMWatcher,
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

// probeRecorder loads and attaches the real recorder for the probing
// process and detaches it again.
func probeRecorder(_ context.Context, _ *kernel.Host) kernel.Finding {
	r, err := NewRecorder(ProcessTreeTarget(uint32(os.Getpid())))
	if err != nil {
		return loadFinding("syscall recorder", err)
	}
	if err := r.Close(); err != nil {
		return kernel.Findingf(kernel.Unknown, "syscall recorder loaded but did not detach: %v", err)
	}
	return kernel.Findingf(kernel.Supported, "syscall recorder loaded, attached to raw_syscalls/sys_enter and detached")
}

// probeOOMWatcher attaches the real OOM watcher the way `nodeshim serve`
// does and reports which hook it got: fentry is Supported, a fallback
// Degraded (the kprobe lacks nothing but costs more; the tracepoint loses
// the victim's cgroup).
func probeOOMWatcher(_ context.Context, _ *kernel.Host) kernel.Finding {
	w, err := WatchOOM(OOMOptions{})
	if err != nil {
		return loadFinding("OOM watcher", err)
	}
	hook, tr := w.Hook(), w.Transport()
	if err := w.Close(); err != nil {
		return kernel.Findingf(kernel.Unknown, "OOM watcher attached to %s but did not detach: %v", hook, err)
	}
	if hook == OOMHookFentry {
		return kernel.Findingf(kernel.Supported, "OOM watcher attached to %s over %s", hook, tr)
	}
	return kernel.Findingf(kernel.Degraded, "OOM watcher fell back to %s over %s (fentry unavailable)", hook, tr)
}

func loadFinding(what string, err error) kernel.Finding {
	if errors.Is(err, ebpf.ErrNotSupported) {
		return kernel.Findingf(kernel.Unsupported, "%s: %v", what, err)
	}
	// The first line only: a verifier log does not fit a report cell.
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return kernel.Findingf(kernel.Unsupported, "%s: %s", what, msg)
}
