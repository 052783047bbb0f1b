package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/downtime"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
)

// BenchmarkDowntime moves a busybox container holding a working set of
// anonymous memory from one podman storage root (node A) to another (node
// B), once checkpointed by `podman container checkpoint --export` and once
// by nodeshim, and restores each archive on B with `podman container
// restore --import`. Per move it reports the checkpoint's total and frozen
// time, the archive's size, the restore's time, and the downtime: from the
// counter's last advance before the freeze on A to its first advance on
// B, seen from the host (one 20 ms count and a 5 ms poll of resolution).
// NODESHIM_DOWNTIME_MIB lists the working sets (default "64,1024").
func BenchmarkDowntime(b *testing.B) {
	p := rt.Podman(b)
	// podman's runc finds CRIU on PATH.
	criutest.RequireOnPath(b)
	a := downtime.Root{P: p}
	nodeB := downtime.SecondRoot(b, p)
	runc := p.RuntimePath(runtimetest.RuntimeRunc)

	sizes, err := downtime.Sizes("NODESHIM_DOWNTIME_MIB", 64, 1024)
	if err != nil {
		b.Fatal(err)
	}
	seq := 0
	for _, mib := range sizes {
		for _, tool := range []string{"podman", "nodeshim"} {
			b.Run(fmt.Sprintf("%dMiB/%s", mib, tool), func(b *testing.B) {
				var sum downtime.Move
				for i := 0; i < b.N; i++ {
					seq++
					r := moveOnce(b, a, nodeB, runc, tool, fmt.Sprintf("downtime-%d", seq), mib)
					sum.Checkpoint += r.Checkpoint
					sum.Frozen += r.Frozen
					sum.Restore += r.Restore
					sum.Downtime += r.Downtime
					sum.ArchiveBytes += r.ArchiveBytes
					sum.AnonBytes += r.AnonBytes
				}
				n := float64(b.N)
				ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / n }
				mb := func(v int64) float64 { return float64(v) / (1 << 20) / n }
				b.ReportMetric(ms(sum.Checkpoint), "checkpoint-ms")
				b.ReportMetric(ms(sum.Frozen), "frozen-ms")
				b.ReportMetric(ms(sum.Restore), "restore-ms")
				b.ReportMetric(ms(sum.Downtime), "downtime-ms")
				b.ReportMetric(mb(sum.ArchiveBytes), "archive-MiB")
				b.ReportMetric(mb(sum.AnonBytes), "anon-MiB")
			})
		}
	}
}

// moveOnce moves the workload from a to nodeB (downtime.MoveContainer),
// checkpointed by tool. Only the checkpoint and the restore are timed.
func moveOnce(b *testing.B, a, nodeB downtime.Root, runc, tool, name string, mib int) downtime.Move {
	b.Helper()
	o := downtime.MoveOptions{Runtime: runc, Timer: b}
	if tool == "nodeshim" {
		o.Checkpoint = func(tb testing.TB, a downtime.Root, name, dir string) (string, time.Duration) {
			tb.Helper()
			out, errOut, err := runTB(tb, "checkpoint", "--container-id", name, "--podman-root", a.P.Root, "--root-dir", dir, "-o", "json")
			if err != nil {
				tb.Fatalf("nodeshim checkpoint: %v: %s", err, errOut)
			}
			var ck checkpointOutput
			if err := json.Unmarshal([]byte(out), &ck); err != nil {
				tb.Fatalf("%v: %s", err, out)
			}
			return ck.Path, time.Duration(ck.FrozenSeconds * float64(time.Second))
		}
	}
	r := downtime.MoveContainer(b, a, nodeB, name, mib, o)
	b.Logf("%s %s: %d MiB anonymous; count %d on A, %d on B; checkpoint %s (frozen %s), archive %d bytes, restore %s, downtime %s",
		tool, name, r.AnonBytes>>20, r.Before, r.After, r.Checkpoint.Round(time.Millisecond), r.Frozen.Round(time.Millisecond),
		r.ArchiveBytes, r.Restore.Round(time.Millisecond), r.Downtime)
	return r
}

// runTB runs nodeshim's root command in this process, like runSplit.
func runTB(tb testing.TB, args ...string) (string, string, error) {
	tb.Helper()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), errOut.String(), err
}
