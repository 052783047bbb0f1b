package bpf

import (
	"context"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/nodeshim/nodeshim/kernel"
)

// TestRequirementsOnThisHost runs every probe on this 6.18 host and holds
// it to what is known here (FACTS.md, bpftool feature probe): BTF and
// tracefs (mounted by `make test`) present, BPF_PROG_TYPE_TRACING refused,
// so the OOM watcher is Degraded to the tracepoint.
func TestRequirementsOnThisHost(t *testing.T) {
	requireBPF(t)
	want := map[string]kernel.Verdict{
		"ebpf.btf-vmlinux":               kernel.Supported,
		"ebpf.prog-raw-tracepoint":       kernel.Supported,
		"ebpf.map-percpu-array":          kernel.Supported,
		"ebpf.helper-ancestor-cgroup-id": kernel.Supported,
		"ebpf.map-ringbuf":               kernel.Supported,
		"ebpf.prog-tracing":              kernel.Unsupported,
		"ebpf.tracefs-oom-mark-victim":   kernel.Supported,
		"ebpf.syscall-recorder":          kernel.Supported,
		"ebpf.oom-watcher":               kernel.Degraded,
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

// hookAvailable is hookAvailableWith with cilium/ebpf's own
// BPF_PROG_TYPE_TRACING probe.
func hookAvailable(h *kernel.Host, hook OOMHook) (bool, string) {
	return hookAvailableWith(h, hook, func() error { return features.HaveProgramType(ebpf.Tracing) })
}
