//go:build vmtest

package bpf

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/cgroup"

	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestOOMKillInGuest makes a real OOM kill in a cgroup v2 memory limit
// inside the kernel-matrix guest (pure cgroup v2, memory controller on)
// and expects exactly one event naming the victim, with its cgroup, from
// the best hook the guest kernel offers (fentry on Debian's 6.1).
func TestOOMKillInGuest(t *testing.T) {
	label := testutil.RequireGuest(t)
	testutil.RequireFile(t, "/sys/kernel/btf/vmlinux")
	cg2, err := cgroup.MountUnder("/sys")
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := os.ReadFile(filepath.Join(cg2, "cgroup.subtree_control"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ctl), "memory") {
		t.Fatalf("memory controller not enabled for children: %q", ctl)
	}
	h := kernel.DefaultHost()
	// The best hook over the ring buffer, the raw tracepoint where the
	// kernel passes it the victim's task_struct, then the tracepoint
	// fallback over the perf buffer (before 6.8 it carries only the pid).
	cases := []struct {
		name string
		opts OOMOptions
	}{
		{"default", OOMOptions{}},
		{"tracepoint over perf buffer", OOMOptions{Hooks: []OOMHook{OOMHookTracepoint}, Transport: OOMTransportPerf}},
	}
	if ok, why := hookAvailable(h, OOMHookRawTracepoint); ok {
		cases = append(cases, struct {
			name string
			opts OOMOptions
		}{"raw tracepoint", OOMOptions{Hooks: []OOMHook{OOMHookRawTracepoint}}})
	} else {
		t.Logf("guest %s: no raw tracepoint case: %s", label, why)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := WatchOOM(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if tc.opts.Hooks == nil {
				if ok, why := hookAvailable(h, OOMHookFentry); ok != (w.Hook() == OOMHookFentry) {
					t.Errorf("watcher on %s, fentry probe says %v (%s)", w.Hook(), ok, why)
				}
			}
			t.Logf("guest %s: OOM watcher on %s over %s", label, w.Hook(), w.Transport())
			wantMemory := w.Hook() != OOMHookTracepoint || tracepointHasMemory(t)

			// The limit goes on a parent of the cgroup that oomScenario
			// creates for the hog.
			parent, err := os.MkdirTemp(cg2, "nodeshim-oom-parent-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(parent) })
			for _, kv := range [][2]string{
				{"cgroup.subtree_control", "+memory"},
				{"memory.max", strconv.Itoa(48 << 20)},
				{"memory.swap.max", "0"},
			} {
				p := filepath.Join(parent, kv[0])
				if err := os.WriteFile(p, []byte(kv[1]), 0); err != nil && !(kv[0] == "memory.swap.max" && os.IsNotExist(err)) {
					t.Fatalf("write %s: %v", p, err)
				}
			}
			oomScenario(t, w, parent, wantMemory, func(int) {})
		})
	}
}

// TestProgramsVerifyInGuest loads and attaches both programs on the guest
// kernel: the CO-RE relocations must resolve on 6.1 as on 6.18.
func TestProgramsVerifyInGuest(t *testing.T) {
	testutil.RequireGuest(t)
	for _, target := range []Target{
		ProcessTreeTarget(uint32(os.Getpid())),
		MountNSTarget(1),
		CgroupTarget(1, 0),
	} {
		rec, err := NewRecorder(target)
		if err != nil {
			t.Fatalf("%s recorder: %v", target.Kind, err)
		}
		if err := rec.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// The cgroup stats pass: cgroup iterators exist since 6.1.
	c, err := OpenCgroupStats(CgroupStatsOptions{HZ: 250})
	if err != nil {
		t.Fatalf("cgroup stats pass: %v", err)
	}
	c.Close()
	h := kernel.DefaultHost()
	for _, hook := range DefaultOOMHooks() {
		for _, tr := range []OOMTransport{OOMTransportRingbuf, OOMTransportPerf} {
			avail, why := hookAvailable(h, hook)
			w, err := WatchOOM(OOMOptions{Hooks: []OOMHook{hook}, Transport: tr})
			if avail != (err == nil) {
				t.Errorf("%s over %s: probe says %v (%s), WatchOOM: %v", hook, tr, avail, why, err)
			}
			if err == nil {
				w.Close()
			}
		}
	}
}
