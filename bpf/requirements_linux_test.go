package bpf

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/kernel/capability"
)

// unameVersion is the running kernel's major.minor.patch, from uname(2).
func unameVersion(t *testing.T) capability.Version {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	rel := unix.ByteSliceToString(u.Release[:])
	m := regexp.MustCompile(`^(\d+)\.(\d+)(?:\.(\d+))?`).FindStringSubmatch(rel)
	if m == nil {
		t.Fatalf("uname release %q has no version", rel)
	}
	var v [3]int
	for i := range v {
		v[i], _ = strconv.Atoi(m[i+1])
	}
	return capability.V(v[0], v[1], v[2])
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestRequirementsOnThisHost runs every probe on this machine and holds it
// to what the machine says through other means: uname(2) against each
// requirement's first kernel, cilium/ebpf's own BPF_PROG_TYPE_TRACING
// check, statfs(2) and the files of tracefs, sysfs and BTF.
//
// The probes run first: on the live host they mount tracefs when none is
// mounted, as serve does (TestReportWithoutTracefs makes that state in a
// mount namespace of its own), so the machine is read after them.
func TestRequirementsOnThisHost(t *testing.T) {
	requireBPF(t)
	version := unameVersion(t)
	reqs := Requirements()
	if len(reqs) != 10 {
		t.Errorf("%d requirements, want 10", len(reqs))
	}
	h := kernel.DefaultHost()
	findings := map[string]capability.Finding{}
	for _, r := range reqs {
		findings[r.ID] = r.Probe(context.Background(), h)
	}

	// cilium/ebpf's check of fentry, which the report's probe reimplements
	// on a shared BTF; root refused (EPERM) counts as unsupported.
	tracingErr := features.HaveProgramType(ebpf.Tracing)
	tracing := tracingErr == nil
	if !tracing && !errors.Is(tracingErr, ebpf.ErrNotSupported) && !errors.Is(tracingErr, unix.EPERM) {
		t.Fatalf("features.HaveProgramType(Tracing): %v", tracingErr)
	}
	var tracefs []string
	for _, root := range []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"} {
		var st unix.Statfs_t
		if unix.Statfs(root, &st) == nil && st.Type == unix.TRACEFS_MAGIC {
			tracefs = append(tracefs, root)
		}
	}
	markVictim, kprobeEvents := false, false
	for _, root := range tracefs {
		markVictim = markVictim || exists(root+"/events/oom/mark_victim/id")
		kprobeEvents = kprobeEvents || exists(root+"/kprobe_events")
	}
	kprobe := exists("/sys/bus/event_source/devices/kprobe/type") || kprobeEvents

	want := map[string]capability.Verdict{
		"ebpf.btf-vmlinux":      capability.Supported, // requireBPF checked the file
		"ebpf.prog-tracing":     capability.Unsupported,
		"ebpf.syscall-recorder": capability.Supported,
		"ebpf.oom-watcher":      capability.Unsupported,
	}
	if tracing {
		want["ebpf.prog-tracing"] = capability.Supported
	}
	switch {
	case len(tracefs) == 0:
		want["ebpf.tracefs-oom-mark-victim"] = capability.Unknown
	case markVictim:
		want["ebpf.tracefs-oom-mark-victim"] = capability.Supported
	default:
		want["ebpf.tracefs-oom-mark-victim"] = capability.Unsupported
	}
	// The raw tracepoint sees the victim's task_struct where the kernel
	// passes it, as the kernel's BTF says. The same change (6.8, and
	// backported to Debian's 6.1) gave the tracepoint's record the
	// victim's memory, which its tracefs format shows.
	rawTP := markVictimTakesTask(btf.NewCache()) == nil
	if markVictim {
		if withMemory := tracepointHasMemory(t); rawTP != withMemory {
			t.Errorf("oom/mark_victim passes the task_struct: %v; its record has the victim's memory: %v", rawTP, withMemory)
		}
	}
	switch {
	case tracing || rawTP:
		want["ebpf.oom-watcher"] = capability.Supported
	case kprobe || markVictim:
		want["ebpf.oom-watcher"] = capability.Degraded
	}

	for _, r := range reqs {
		t.Run(r.ID, func(t *testing.T) {
			if r.Group != "ebpf" || len(r.NeededBy) == 0 || r.Probe == nil {
				t.Fatalf("incomplete requirement: %+v", r)
			}
			f := findings[r.ID]
			t.Logf("%s: %s (%s)", r.ID, f.Verdict, f.Evidence)
			if f.Evidence == "" {
				t.Error("no evidence")
			}
			if w, ok := want[r.ID]; ok {
				if f.Verdict != w {
					t.Errorf("verdict %s, want %s", f.Verdict, w)
				}
				return
			}
			// The feature probes: a kernel at least as new as the feature's
			// first release has it; an older one may have it backported,
			// but the probe must still tell.
			switch {
			case f.Verdict == capability.Unknown:
				t.Errorf("verdict Unknown")
			case !r.MinKernel.IsZero() && version.AtLeast(r.MinKernel) && f.Verdict != capability.Supported:
				t.Errorf("verdict %s on %s, which is at least %s", f.Verdict, version, r.MinKernel)
			}
		})
	}
}

func TestRequirementProbesOnEmptyHost(t *testing.T) {
	h := &kernel.Host{ProcRoot: t.TempDir(), SysRoot: t.TempDir()}
	for _, r := range Requirements() {
		switch r.ID {
		case "ebpf.btf-vmlinux":
			if f := r.Probe(context.Background(), h); f.Verdict != capability.Unsupported {
				t.Errorf("%s on an empty /sys: %s (%s), want Unsupported", r.ID, f.Verdict, f.Evidence)
			}
		case "ebpf.tracefs-oom-mark-victim":
			// Another root is only read, never mounted on.
			if f := r.Probe(context.Background(), h); f.Verdict != capability.Unknown || !strings.Contains(f.Evidence, "not mounted") {
				t.Errorf("%s without tracefs: %s (%s), want Unknown, not mounted", r.ID, f.Verdict, f.Evidence)
			}
		}
	}
}

// hookAvailable reports whether this kernel should accept hook, with
// cilium/ebpf's own BPF_PROG_TYPE_TRACING probe; on the live host it mounts
// tracefs when none is mounted, as WatchOOM does.
func hookAvailable(h capability.Host, hook OOMHook) (bool, string) {
	f := hookFinding(h, hook, btf.NewCache(), func() error { return features.HaveProgramType(ebpf.Tracing) }, ensureNow)
	return f.Verdict == capability.Supported, f.Evidence
}

// ensureNow is an ensureFunc that calls ensureTracefs each time.
func ensureNow() (tracefsMount, error) {
	p, m, err := ensureTracefs()
	return tracefsMount{point: p, mounted: m}, err
}

// TestProgramLoadProbesOutlastTheDefaultTimeout: the probes that load real
// programs get longer than the collector's default, which a guest under
// emulation at boot exceeds; the quick feature probes keep the default.
func TestProgramLoadProbesOutlastTheDefaultTimeout(t *testing.T) {
	slow := 0
	for _, r := range Requirements() {
		switch {
		case r.Slow && r.Timeout <= capability.DefaultProbeTimeout:
			t.Errorf("%s loads programs but has timeout %v, not more than the default %v", r.ID, r.Timeout, capability.DefaultProbeTimeout)
		case !r.Slow && r.Timeout != 0:
			t.Errorf("%s is a quick probe with its own timeout %v", r.ID, r.Timeout)
		case r.Slow:
			slow++
		}
	}
	if slow == 0 {
		t.Error("no probe loads programs")
	}
}
