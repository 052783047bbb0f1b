package bpf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"golang.org/x/sys/unix"
)

// The nodeshim features that these programs serve, as the report names them.
const (
	neededByRecorder = "nodeshim: seccomp record (syscall recorder)"
	neededByOOM      = "nodeshim: OOM watcher (MemoryPressure reasons, OOM kill metric)"
	neededByPodPass  = "nodeshim: the per-pod pressure view's PSI and memory counters in one kernel pass (else each pod's files are read)"
)

// Requirements returns what the syscall recorder and the OOM watcher need
// from the kernel, each with a probe, for `nodeshim report`. The feature
// probes go through cilium/ebpf's features package (they load tiny
// programs and create tiny maps); the last two load the real programs.
//
// The two program loads share one decoded copy of the kernel BTF (about
// 35-50 ms of CPU to decode here), held for as long as the returned
// requirements are.
func Requirements() []capability.Requirement {
	cache := btf.NewCache()
	tracing := sync.OnceValue(func() error { return haveTracing(cache) })
	// The tracefs probe and the OOM watcher's probe run concurrently; one
	// look (and at most one mount) serves both.
	tracefs := sync.OnceValues(func() (tracefsMount, error) {
		p, m, err := ensureTracefs()
		return tracefsMount{point: p, mounted: m}, err
	})
	return []capability.Requirement{
		{
			ID: "ebpf.btf-vmlinux", Group: "ebpf", MinKernel: capability.V(5, 4, 0),
			NeededBy: []string{neededByRecorder + ", CO-RE relocations", neededByOOM + ", CO-RE relocations"},
			Probe:    probeVmlinuxBTF,
		},
		{
			ID: "ebpf.prog-raw-tracepoint", Group: "ebpf", MinKernel: capability.V(4, 17, 0),
			NeededBy: []string{neededByRecorder + " on raw_syscalls/sys_enter", neededByOOM + " on oom/mark_victim where fentry is refused (kernels that pass it the victim's task_struct: 6.8+, and older ones with the change backported)"},
			Probe:    featureProbe(func() error { return features.HaveProgramType(ebpf.RawTracepoint) }, "BPF_PROG_TYPE_RAW_TRACEPOINT"),
		},
		{
			ID: "ebpf.map-percpu-array", Group: "ebpf", MinKernel: capability.V(4, 6, 0),
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
			ID: "ebpf.map-ringbuf", Group: "ebpf", MinKernel: capability.V(5, 8, 0),
			NeededBy: []string{neededByOOM + " (else it falls back to a perf buffer)"},
			Probe:    probeRingbuf,
		},
		{
			ID: "ebpf.prog-tracing", Group: "ebpf", MinKernel: capability.V(5, 5, 0),
			NeededBy: []string{neededByOOM + ": fentry on mark_oom_victim, which sees the victim's cgroup"},
			Probe:    featureProbe(tracing, "BPF_PROG_TYPE_TRACING (fentry on bpf_init)"),
			// Decodes the kernel BTF that the two program loads share.
			Slow:    true,
			PerBoot: true,
			Timeout: loadTimeout,
		},
		{
			ID: "ebpf.tracefs-oom-mark-victim", Group: "ebpf",
			NeededBy: []string{neededByOOM + ": the oom/mark_victim tracepoint fallback"},
			Probe:    probeTracefsEvent("oom", "mark_victim", tracefs),
		},
		{
			ID: "ebpf.syscall-recorder", Group: "ebpf",
			NeededBy: []string{neededByRecorder},
			Probe:    recorderProbe(cache),
			Slow:     true,
			PerBoot:  true,
			Timeout:  loadTimeout,
		},
		{
			ID: "ebpf.cgroup-stats-pass", Group: "ebpf", MinKernel: capability.V(6, 1, 0),
			NeededBy: []string{neededByPodPass},
			Probe:    cgroupStatsProbe(cache),
			Slow:     true,
			PerBoot:  true,
			Timeout:  loadTimeout,
		},
		{
			ID: "ebpf.oom-watcher", Group: "ebpf",
			NeededBy: []string{neededByOOM},
			Probe:    oomWatcherProbe(cache, tracing, tracefs),
			// Detaching the perf-event tracepoint, where that is the
			// hook, waits for RCU grace periods (a tasks-trace one as
			// the program leaves the event, then a tasks-trace and a
			// normal one as the tracepoint is unregistered): 40-70 ms of
			// wall time on this host's kernel, the longest wait of a
			// first report, so it starts first.
			Slow:    true,
			Waits:   true,
			PerBoot: true,
			Timeout: loadTimeout,
		},
	}
}

// loadTimeout bounds the probes that decode the kernel BTF and load real
// programs. They take 40-160 ms of wall time on the development host, but
// 0.8-2 s in a Debian 6.1 guest under QEMU TCG at boot, where two of them
// ran past the default probe timeout (2 s) and were reported Unknown.
const loadTimeout = 10 * time.Second

// featureProbe turns a cilium/ebpf feature check into a probe: nil is
// Supported, ebpf.ErrNotSupported is Unsupported, any other error Unknown.
func featureProbe(check func() error, what string) func(context.Context, capability.Host) capability.Finding {
	return func(context.Context, capability.Host) capability.Finding {
		err := check()
		switch {
		case err == nil:
			return capability.Findingf(capability.Supported, "%s: the kernel accepts it", what)
		case errors.Is(err, ebpf.ErrNotSupported):
			return capability.Findingf(capability.Unsupported, "%s: %v", what, err)
		case errors.Is(err, unix.EPERM) && os.Geteuid() == 0:
			// Root with CAP_BPF and CAP_PERFMON is refused: the kernel
			// (lockdown, an LSM, a missing trampoline) will not run it.
			return capability.Findingf(capability.Unsupported, "%s: refused to root: %v", what, err)
		}
		return capability.Findingf(capability.Unknown, "%s: probe failed: %v", what, err)
	}
}

func probeVmlinuxBTF(_ context.Context, h capability.Host) capability.Finding {
	p := h.Path("/sys/kernel/btf/vmlinux")
	fi, err := os.Stat(p)
	switch {
	case err == nil:
		return capability.Findingf(capability.Supported, "%s: %d bytes", p, fi.Size())
	case errors.Is(err, os.ErrNotExist):
		return capability.Findingf(capability.Unsupported, "%s is missing (CONFIG_DEBUG_INFO_BTF=n)", p)
	}
	return capability.Findingf(capability.Unknown, "stat %s: %v", p, err)
}

func probeRingbuf(_ context.Context, _ capability.Host) capability.Finding {
	err := features.HaveMapType(ebpf.RingBuf)
	switch {
	case err == nil:
		return capability.Findingf(capability.Supported, "BPF_MAP_TYPE_RINGBUF: the kernel accepts it")
	case errors.Is(err, ebpf.ErrNotSupported):
		return capability.Findingf(capability.Degraded, "BPF_MAP_TYPE_RINGBUF: %v; OOM events use a perf buffer", err)
	}
	return capability.Findingf(capability.Unknown, "BPF_MAP_TYPE_RINGBUF: probe failed: %v", err)
}

// tracefsRoots are where tracefs is found, in the order the kernel
// documents (Documentation/trace/ftrace.rst).
func tracefsRoots(h capability.Host) []string {
	return []string{h.Path(TracefsMountPoint), h.Path("/sys/kernel/debug/tracing")}
}

// tracefsMount is what ensureTracefs found or did.
type tracefsMount struct {
	point   string
	mounted bool
}

// ensureFunc makes tracefs available, as ensureTracefs does.
type ensureFunc func() (tracefsMount, error)

// liveTracefs reports whether h's tracefs mount point is nodeshim's own, so
// that a mount by ensureTracefs is the one the probe then reads. A report
// on another root (--sys-root, a recorded host) only reads what is there.
func liveTracefs(h capability.Host) bool {
	return h.Path(TracefsMountPoint) == TracefsMountPoint
}

// probeTracefsEvent finds a tracepoint in tracefs.
//
// On the live host the probe mounts tracefs first when none is mounted,
// exactly as WatchOOM does, and says so in the evidence. Tracefs is not
// mounted at boot on every machine, but the kernel has it and `nodeshim
// serve` mounts it before attaching; a report that called the tracepoint
// missing there would be wrong about the kernel, and one that called it
// Unknown would be wrong about what serve gets. The report runs as root,
// as serve does, and the mount is the standard one systemd makes, left in
// place like serve's. Without the privilege to mount, the verdict is
// Unknown (serve, as root, can mount it); only a kernel without tracefs
// is Unsupported.
func probeTracefsEvent(group, event string, ensure ensureFunc) func(context.Context, capability.Host) capability.Finding {
	return func(_ context.Context, h capability.Host) capability.Finding {
		if liveTracefs(h) {
			return probeLiveTracefsEvent(group, event, ensure)
		}
		roots := tracefsRoots(h)
		for _, r := range roots {
			p := r + "/events/" + group + "/" + event + "/id"
			if _, err := os.Stat(p); err == nil {
				return capability.Findingf(capability.Supported, "%s exists", p)
			}
		}
		for _, r := range roots {
			if _, err := os.Stat(r + "/events"); err == nil {
				return capability.Findingf(capability.Unsupported, "tracefs at %s has no %s/%s event", r, group, event)
			}
		}
		why := ""
		if kernelHasTracefs(h) {
			why = fmt.Sprintf("; the kernel has tracefs (%s lists it), and nodeshim serve mounts it at %s",
				h.Path("/proc/filesystems"), TracefsMountPoint)
		}
		return capability.Findingf(capability.Unknown, "tracefs is not mounted at %s%s", strings.Join(roots, " or "), why)
	}
}

// probeLiveTracefsEvent is probeTracefsEvent on the live host.
func probeLiveTracefsEvent(group, event string, ensure ensureFunc) capability.Finding {
	m, err := ensure()
	switch {
	case errors.Is(err, ebpf.ErrNotSupported):
		return capability.Findingf(capability.Unsupported, "%v", err)
	case err != nil:
		return capability.Findingf(capability.Unknown, "%v; nodeshim serve mounts it when run as root", err)
	}
	how := ""
	if m.mounted {
		how = fmt.Sprintf(" (tracefs was not mounted; mounted at %s, as nodeshim serve does)", m.point)
	}
	p := filepath.Join(m.point, "events", group, event, "id")
	_, err = os.Stat(p)
	switch {
	case err == nil:
		return capability.Findingf(capability.Supported, "%s exists%s", p, how)
	case errors.Is(err, os.ErrNotExist):
		return capability.Findingf(capability.Unsupported, "tracefs at %s has no %s/%s event%s", m.point, group, event, how)
	}
	return capability.Findingf(capability.Unknown, "stat %s: %v%s", p, err, how)
}

// kernelHasTracefs reports whether h's /proc/filesystems lists tracefs.
func kernelHasTracefs(h capability.Host) bool {
	data, err := os.ReadFile(h.Path("/proc/filesystems"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[len(f)-1] == "tracefs" {
			return true
		}
	}
	return false
}

// recorderProbe loads and attaches the real recorder for the probing
// process and detaches it again.
func recorderProbe(cache *btf.Cache) func(context.Context, capability.Host) capability.Finding {
	return func(context.Context, capability.Host) capability.Finding {
		r, err := newRecorder(ProcessTreeTarget(uint32(os.Getpid())), cache)
		if err != nil {
			return loadFinding("syscall recorder", err)
		}
		if err := r.Close(); err != nil {
			return capability.Findingf(capability.Unknown, "syscall recorder loaded but did not detach: %v", err)
		}
		return capability.Findingf(capability.Supported, "syscall recorder loaded, attached to raw_syscalls/sys_enter and detached")
	}
}

// cgroupStatsProbe loads the cgroup stats pass (a cgroup iterator, 6.1+).
func cgroupStatsProbe(cache *btf.Cache) func(context.Context, capability.Host) capability.Finding {
	return func(context.Context, capability.Host) capability.Finding {
		// CONFIG_HZ does not matter to the load.
		c, err := openCgroupStats(CgroupStatsOptions{HZ: 250, Capacity: 1}, cache)
		if err != nil {
			return loadFinding("cgroup stats pass (BPF cgroup iterator)", err)
		}
		c.Close()
		return capability.Findingf(capability.Supported, "cgroup stats pass loaded: a BPF cgroup iterator reads the pods' PSI and memory counters in one kernel pass")
	}
}

// oomWatcherProbe attaches the real OOM watcher and reports which hook it
// got: fentry is Supported, a fallback Degraded (the kprobe lacks nothing
// but costs more; the tracepoint loses the victim's cgroup). Hooks that the
// cheap feature probes of hookAvailable rule out are not loaded at all (a
// failed load costs as much as a good one); the evidence says why each was
// passed over. The remaining hooks are tried in order, as `nodeshim serve`
// tries them, so a hook that looks available but fails still falls back.
// When no hook is available only because tracefs could not be mounted
// (no privilege), the verdict is Unknown: serve, as root, mounts it.
func oomWatcherProbe(cache *btf.Cache, tracing func() error, ensure ensureFunc) func(context.Context, capability.Host) capability.Finding {
	return func(_ context.Context, h capability.Host) capability.Finding {
		var hooks []OOMHook
		var skipped []string
		undecided := false
		for _, hook := range DefaultOOMHooks() {
			f := hookFinding(h, hook, cache, tracing, ensure)
			switch f.Verdict {
			case capability.Supported:
				hooks = append(hooks, hook)
				continue
			case capability.Unknown:
				undecided = true
			}
			skipped = append(skipped, fmt.Sprintf("%s skipped: %s", hook, f.Evidence))
		}
		if len(hooks) == 0 {
			v := capability.Unsupported
			if undecided {
				v = capability.Unknown
			}
			return capability.Findingf(v, "OOM watcher: no hook available: %s", strings.Join(skipped, "; "))
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
			return capability.Findingf(capability.Unknown, "OOM watcher attached to %s but did not detach: %v", hook, err)
		}
		if hook == OOMHookFentry || hook == OOMHookRawTracepoint {
			// Both see the victim's task_struct: pid, comm, cgroup and
			// memory.
			f := capability.Findingf(capability.Supported, "OOM watcher attached to %s over %s", hook, tr)
			if len(skipped) > 0 {
				f.Evidence += " (" + strings.Join(skipped, "; ") + ")"
			}
			return f
		}
		why := "fentry unavailable"
		if len(skipped) > 0 {
			why = strings.Join(skipped, "; ")
		}
		return capability.Findingf(capability.Degraded, "OOM watcher fell back to %s over %s (%s)", hook, tr, why)
	}
}

// hookFinding says whether this kernel should accept hook, from cheap
// feature probes (BPF_PROG_TYPE_TRACING, what the kernel BTF says the
// oom/mark_victim tracepoint passes, the kprobe PMU or kprobe_events, the
// tracepoint in tracefs), as a finding (Supported when available, Unknown
// when it cannot tell), with the kernel BTF, the BPF_PROG_TYPE_TRACING
// check and the tracefs mount supplied by the caller (the report shares
// them between probes).
func hookFinding(h capability.Host, hook OOMHook, cache *btf.Cache, tracing func() error, ensure ensureFunc) capability.Finding {
	switch hook {
	case OOMHookFentry:
		err := tracing()
		if err == nil {
			return capability.Findingf(capability.Supported, "BPF_PROG_TYPE_TRACING accepted")
		}
		return capability.Findingf(capability.Unsupported, "BPF_PROG_TYPE_TRACING: %v", err)
	case OOMHookRawTracepoint:
		err := markVictimTakesTask(cache)
		switch {
		case err == nil:
			return capability.Findingf(capability.Supported, "oom/mark_victim passes the victim's task_struct")
		case errors.Is(err, ebpf.ErrNotSupported):
			return capability.Findingf(capability.Unsupported, "%v", err)
		}
		return capability.Findingf(capability.Unknown, "%v", err)
	case OOMHookKprobe:
		// perf_kprobe PMU (4.17+) or kprobe_events in tracefs; both
		// need CONFIG_KPROBES. cilium/ebpf's link.Kprobe uses the same two.
		if kprobePMU(h.Path("/sys")) {
			return capability.Findingf(capability.Supported, "kprobe PMU present")
		}
		roots := tracefsRoots(h)
		if liveTracefs(h) {
			m, err := ensure()
			if err != nil {
				if errors.Is(err, ebpf.ErrNotSupported) {
					return capability.Findingf(capability.Unsupported, "no kprobe PMU, and %v", err)
				}
				return capability.Findingf(capability.Unknown, "no kprobe PMU, and %v", err)
			}
			roots = []string{m.point}
		}
		for _, r := range roots {
			if _, err := os.Stat(r + "/kprobe_events"); err == nil {
				return capability.Findingf(capability.Supported, "%s/kprobe_events present", r)
			}
		}
		return capability.Findingf(capability.Unsupported, "no kprobe PMU and no kprobe_events in %s (CONFIG_KPROBES=n?)", strings.Join(roots, " or "))
	case OOMHookTracepoint:
		return probeTracefsEvent("oom", "mark_victim", ensure)(context.Background(), h)
	}
	return capability.Findingf(capability.Unsupported, "unknown hook")
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

func loadFinding(what string, err error) capability.Finding {
	if errors.Is(err, ebpf.ErrNotSupported) {
		return capability.Findingf(capability.Unsupported, "%s: %v", what, err)
	}
	// The first line only: a verifier log does not fit a report cell.
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return capability.Findingf(capability.Unsupported, "%s: %s", what, msg)
}
