package bpf

import (
	"context"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/kernel/capability"
)

// TestRequirementsOnThisHost runs every probe on this 6.18 host and holds
// it to what is known here (FACTS.md, bpftool feature probe): BTF and
// tracefs present (the probe mounts tracefs when it is not mounted, as on
// a freshly booted machine; TestReportWithoutTracefs makes that state),
// BPF_PROG_TYPE_TRACING refused, so the OOM watcher is Degraded to the
// tracepoint.
func TestRequirementsOnThisHost(t *testing.T) {
	requireBPF(t)
	want := map[string]capability.Verdict{
		"ebpf.btf-vmlinux":               capability.Supported,
		"ebpf.prog-raw-tracepoint":       capability.Supported,
		"ebpf.map-percpu-array":          capability.Supported,
		"ebpf.helper-ancestor-cgroup-id": capability.Supported,
		"ebpf.map-ringbuf":               capability.Supported,
		"ebpf.prog-tracing":              capability.Unsupported,
		"ebpf.tracefs-oom-mark-victim":   capability.Supported,
		"ebpf.syscall-recorder":          capability.Supported,
		"ebpf.oom-watcher":               capability.Degraded,
	}
	reqs := Requirements()
	if len(reqs) != len(want) {
		t.Errorf("%d requirements, want %d", len(reqs), len(want))
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
			if w, ok := want[r.ID]; !ok || f.Verdict != w {
				t.Errorf("verdict %s, want %s", f.Verdict, w)
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
	f := hookFinding(h, hook, func() error { return features.HaveProgramType(ebpf.Tracing) }, ensureNow)
	return f.Verdict == capability.Supported, f.Evidence
}
