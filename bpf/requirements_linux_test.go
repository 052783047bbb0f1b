package bpf

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/kernel"
)

// unameVersion is the running kernel's major.minor.patch, from uname(2).
func unameVersion(t *testing.T) kernel.Version {
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
	return kernel.V(v[0], v[1], v[2])
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestRequirementsOnThisHost runs every probe on this machine and holds it
// to what the machine says through other means: uname(2) against each
// requirement's first kernel, cilium/ebpf's own BPF_PROG_TYPE_TRACING
// check, statfs(2) and the files of tracefs, sysfs and BTF.
func TestRequirementsOnThisHost(t *testing.T) {
	requireBPF(t)
	version := unameVersion(t)

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

	want := map[string]kernel.Verdict{
		"ebpf.btf-vmlinux":      kernel.Supported, // requireBPF checked the file
		"ebpf.prog-tracing":     kernel.Unsupported,
		"ebpf.syscall-recorder": kernel.Supported,
		"ebpf.oom-watcher":      kernel.Unsupported,
	}
	if tracing {
		want["ebpf.prog-tracing"] = kernel.Supported
	}
	switch {
	case len(tracefs) == 0:
		want["ebpf.tracefs-oom-mark-victim"] = kernel.Unknown
	case markVictim:
		want["ebpf.tracefs-oom-mark-victim"] = kernel.Supported
	default:
		want["ebpf.tracefs-oom-mark-victim"] = kernel.Unsupported
	}
	switch {
	case tracing:
		want["ebpf.oom-watcher"] = kernel.Supported
	case kprobe || markVictim:
		want["ebpf.oom-watcher"] = kernel.Degraded
	}

	reqs := Requirements()
	if len(reqs) != 9 {
		t.Errorf("%d requirements, want 9", len(reqs))
	}
	h := kernel.DefaultHost()
	for _, r := range reqs {
		t.Run(r.ID, func(t *testing.T) {
			if r.Group != "ebpf" || len(r.NeededBy) == 0 || r.Probe == nil {
				t.Fatalf("incomplete requirement: %+v", r)
			}
			f := r.Probe(context.Background(), h)
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
			case f.Verdict == kernel.Unknown:
				t.Errorf("verdict Unknown")
			case !r.MinKernel.IsZero() && version.AtLeast(r.MinKernel) && f.Verdict != kernel.Supported:
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
			if f := r.Probe(context.Background(), h); f.Verdict != kernel.Unsupported {
				t.Errorf("%s on an empty /sys: %s (%s), want Unsupported", r.ID, f.Verdict, f.Evidence)
			}
		case "ebpf.tracefs-oom-mark-victim":
			if f := r.Probe(context.Background(), h); f.Verdict != kernel.Unknown {
				t.Errorf("%s without tracefs: %s (%s), want Unknown", r.ID, f.Verdict, f.Evidence)
			}
		}
	}
}
