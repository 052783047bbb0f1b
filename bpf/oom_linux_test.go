package bpf

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/cgroup"

	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestOOMWatcherHooks attaches each hook over each transport and holds the
// outcome to the feature probes: on this 6.18 host BPF_PROG_TYPE_TRACING is
// refused (bpftool feature probe agrees) and CONFIG_KPROBES is off, so the
// raw tracepoint and the tracepoint attach; in the 6.1 guest fentry does
// too (Debian's 6.1 passes the victim's task_struct to the tracepoint, as
// 6.8 does).
func TestOOMWatcherHooks(t *testing.T) {
	requireBPF(t)
	h := kernel.DefaultHost()
	for _, hook := range DefaultOOMHooks() {
		for _, tr := range []OOMTransport{OOMTransportRingbuf, OOMTransportPerf} {
			t.Run(string(hook)+"/"+string(tr), func(t *testing.T) {
				avail, why := hookAvailable(h, hook)
				w, err := WatchOOM(OOMOptions{Hooks: []OOMHook{hook}, Transport: tr})
				if !avail {
					if err == nil {
						w.Close()
						t.Fatalf("attached although the probe says unavailable (%s)", why)
					}
					t.Logf("unavailable as probed (%s): %v", why, err)
					return
				}
				if err != nil {
					t.Fatalf("probe says available (%s): %v", why, err)
				}
				if w.Hook() != hook || w.Transport() != tr {
					t.Errorf("attached to %s over %s, want %s over %s", w.Hook(), w.Transport(), hook, tr)
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				if _, open := <-w.Events(); open {
					t.Error("Events still open after Close")
				}
			})
		}
	}
}

func TestOOMWatcherDefaultPicksBestHook(t *testing.T) {
	requireBPF(t)
	h := kernel.DefaultHost()
	want := OOMHook("")
	for _, hook := range DefaultOOMHooks() {
		if ok, _ := hookAvailable(h, hook); ok {
			want = hook
			break
		}
	}
	w, err := WatchOOM(OOMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Hook() != want || w.Transport() != OOMTransportRingbuf {
		t.Errorf("default attached to %s over %s, want %s over ringbuf", w.Hook(), w.Transport(), want)
	}
}

func TestOOMWatcherUnknownHook(t *testing.T) {
	_, err := WatchOOM(OOMOptions{Hooks: []OOMHook{"nowhere"}, Transport: OOMTransportPerf})
	if err == nil {
		t.Fatal("attached to an unknown hook")
	}
}

// TestOOMKillOnHost makes a real OOM kill with the memory controller this
// machine has. On a hybrid machine its cgroup v1 memory controller limits
// the hog, and its cgroup v2 hierarchy, which has no memory controller,
// gives it a cgroup id to check. On pure cgroup v2 memory.max on a parent
// of the hog's cgroup limits it, as the guest test does over more hooks.
func TestOOMKillOnHost(t *testing.T) {
	requireBPF(t)
	const memcgV1 = "/sys/fs/cgroup/memory"
	cg2, err := cgroup.MountUnder("/sys")
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := os.ReadFile(filepath.Join(cg2, "cgroup.subtree_control"))
	if err != nil {
		t.Fatal(err)
	}
	memoryOnV2 := slices.Contains(strings.Fields(string(ctl)), "memory")
	if !memoryOnV2 {
		testutil.RequireFile(t, filepath.Join(memcgV1, "memory.limit_in_bytes"))
	}
	for _, tr := range []OOMTransport{OOMTransportRingbuf, OOMTransportPerf} {
		t.Run(string(tr), func(t *testing.T) {
			w, err := WatchOOM(OOMOptions{Transport: tr})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			parent := memcgV1
			if memoryOnV2 {
				parent = cg2
			}
			memcg, err := os.MkdirTemp(parent, "nodeshim-oom-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := os.Remove(memcg); err != nil && !errors.Is(err, os.ErrNotExist) {
					t.Errorf("remove %s: %v", memcg, err)
				}
			})
			write := func(file, value string) {
				if err := os.WriteFile(filepath.Join(memcg, file), []byte(value), 0); err != nil {
					t.Fatal(err)
				}
			}
			if memoryOnV2 {
				// The hog's cgroup, which oomScenario creates, goes
				// below the limited one.
				write("cgroup.subtree_control", "+memory")
				write("memory.max", strconv.Itoa(48<<20))
				if err := os.WriteFile(filepath.Join(memcg, "memory.swap.max"), []byte("0"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
					t.Fatal(err)
				}
				wantMemory := w.Hook() != OOMHookTracepoint || tracepointHasMemory(t)
				oomScenario(t, w, memcg, wantMemory, func(int) {})
				return
			}
			write("memory.limit_in_bytes", strconv.Itoa(48<<20))
			oomScenario(t, w, cg2, true, func(pid int) {
				write("cgroup.procs", strconv.Itoa(pid))
			})
		})
	}
}

func TestOOMWatcherErrNilAfterClose(t *testing.T) {
	requireBPF(t)
	w, err := WatchOOM(OOMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Err(); err != nil {
		t.Fatalf("Err while running: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Err(); err != nil {
		t.Fatalf("Err after Close: %v", err)
	}
}
