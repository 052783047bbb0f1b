package main

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/bpf"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// containerSyscalls is how many one-byte reads and writes a round of the
// benchmark's workload makes (busybox dd, bs=1).
const containerSyscalls = 100000

// BenchmarkRecordContainer measures what recording a running container
// costs its workload: a syscall-heavy round (dd of 100,000 one-byte
// blocks: 200,000 syscalls) run in a podman container's mount namespace
// (nsenter into it, as podman exec does), unrecorded and while the
// recorder records the container (its mount namespace, what record
// --container-id attaches to), side by side in one binary, and in
// alternating rounds ("interleaved"). ns/syscall is the round's wall time
// over its syscalls, the process start included.
func BenchmarkRecordContainer(b *testing.B) {
	testutil.RequireRoot(b)
	testutil.RequireFile(b, "/sys/kernel/btf/vmlinux")
	nsenter := testutil.RequireBinary(b, "nsenter")
	p := rt.Podman(b)
	res := p.Run(b, runtimetest.RunOptions{Detach: true, Flags: []string{"--security-opt", "seccomp=unconfined"},
		Command: []string{"sleep", "3600"}})
	if res.ExitCode != 0 {
		b.Fatalf("podman run: exit %d: %s", res.ExitCode, res.Stderr)
	}
	id := strings.TrimSpace(res.Stdout)
	out, err := p.Command("inspect", "--format", "{{.State.Pid}}", id).Output()
	if err != nil {
		b.Fatalf("podman inspect: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		b.Fatal(err)
	}
	round := func(b *testing.B) {
		cmd := exec.Command(nsenter, "--target", strconv.Itoa(pid), "--mount", "--root", "--wd",
			"/bin/busybox", "dd", "if=/dev/zero", "of=/dev/null", "bs=1", fmt.Sprintf("count=%d", containerSyscalls))
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("dd in the container: %v: %s", err, out)
		}
	}
	target, err := bpf.PIDTarget("/proc", pid)
	if err != nil {
		b.Fatal(err)
	}
	if target.Kind != bpf.TargetMountNS {
		b.Fatalf("the container is recorded as a %s, not its mount namespace", target.Kind)
	}
	// Rounds without and with the recorder alternate, so that the load
	// of other users of the machine falls on both alike; attaching and
	// detaching are outside the timed rounds.
	b.Run("interleaved", func(b *testing.B) {
		var plain, recorded time.Duration
		b.ReportAllocs()
		for b.Loop() {
			start := time.Now()
			round(b)
			plain += time.Since(start)
			rec, err := bpf.NewRecorder(target)
			if err != nil {
				b.Fatal(err)
			}
			start = time.Now()
			round(b)
			recorded += time.Since(start)
			if err := rec.Close(); err != nil {
				b.Fatal(err)
			}
		}
		per := func(d time.Duration) float64 {
			return float64(d.Nanoseconds()) / float64(b.N) / (2 * containerSyscalls)
		}
		b.ReportMetric(per(plain), "unrecorded-ns/syscall")
		b.ReportMetric(per(recorded), "recorded-ns/syscall")
		b.ReportMetric(float64(recorded)/float64(plain), "recorded/unrecorded")
	})
	for _, recorded := range []bool{false, true} {
		name := "unrecorded"
		if recorded {
			name = "recorded"
		}
		b.Run(name, func(b *testing.B) {
			var rec *bpf.Recorder
			if recorded {
				var err error
				if rec, err = bpf.NewRecorder(target); err != nil {
					b.Fatal(err)
				}
				defer rec.Close()
			}
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for b.Loop() {
				round(b)
			}
			b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N)/(2*containerSyscalls), "ns/syscall")
			if rec == nil {
				return
			}
			b.StopTimer()
			counts, err := rec.Counts()
			if err != nil {
				b.Fatal(err)
			}
			// The recording saw every round's writes.
			var writes uint64
			for _, c := range counts {
				if name, _ := bpf.SyscallName(c.Nr); name == "write" {
					writes = c.Count
				}
			}
			if writes < uint64(b.N)*containerSyscalls {
				b.Errorf("recorded %d writes over %d rounds, want at least %d", writes, b.N, uint64(b.N)*containerSyscalls)
			}
		})
	}
}
