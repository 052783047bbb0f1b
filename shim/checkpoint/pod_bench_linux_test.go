package checkpoint

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
)

// BenchmarkPodCheckpoint measures a pod checkpoint of a two-container pod
// of containerd 2.3.7 (each container a shell holding a working set of
// 64 MiB or 1 GiB and counting) beside containerd's own CRI
// CheckpointContainer of each container in turn, in the same iteration:
// nodeshim's frozen time (the pod's one freeze to its thaw) and total time
// against the sum of containerd's totals and of its frozen times (CRIU's
// frozen_time of each archive: containerd freezes the containers one after
// the other). ratio is nodeshim's total over the sum of containerd's
// (goal: <= 1.0).
func BenchmarkPodCheckpoint(b *testing.B) {
	c := rt.Containerd2(b)
	bin := criutest.Require(b)
	for _, mib := range []int{64, 1024} {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			p := c.RunPod(b, runtimetest.PodOptions{})
			var ctrs []*runtimetest.Container
			for _, n := range []string{"app", "sidecar"} {
				ctrs = append(ctrs, p.Run(b, runtimetest.ContainerOptions{Name: n, Command: workload(mib)}))
			}
			for _, ctr := range ctrs {
				benchWaitCount(b, ctr, 2)
			}
			ref := PodRef{Namespace: p.Config.Metadata.Namespace, Name: p.Config.Metadata.Name}
			var podFrozen, podTotal, ownTotal, ownFrozen time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				dir := filepath.Join(b.TempDir(), "checkpoints")
				svc := New(Options{
					Settings: func() Settings {
						return Settings{Enabled: true, Dir: dir, DefaultTimeout: 10 * time.Minute, RuntimeEndpoint: c.Address}
					},
					FindCriu: func() (criu.Binary, error) { return bin, nil },
					LockDir:  filepath.Join(b.TempDir(), "locks"),
					Model:    status.New(nil),
				})
				start := time.Now()
				res, err := svc.CheckpointPod(context.Background(), ref, PodOptions{})
				if err != nil {
					b.Fatal(err)
				}
				podTotal += time.Since(start)
				podFrozen += res.Frozen
				svc.Close()
				os.RemoveAll(dir)

				own := b.TempDir()
				for _, ctr := range ctrs {
					path := filepath.Join(own, ctr.Name+".tar")
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
					start := time.Now()
					_, err := c.Runtime.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: ctr.ID, Location: path, Timeout: 600})
					cancel()
					if err != nil {
						b.Fatalf("containerd CheckpointContainer %s: %v", ctr.Name, err)
					}
					ownTotal += time.Since(start)
					st, err := criu.ArchiveDumpStats(path)
					if err != nil {
						b.Fatal(err)
					}
					ownFrozen += time.Duration(st.GetFrozenTime()) * time.Microsecond
					os.Remove(path)
				}
			}
			b.StopTimer()
			n := time.Duration(b.N)
			ms := func(d time.Duration) float64 { return float64(d/n) / float64(time.Millisecond) }
			b.ReportMetric(ms(podFrozen), "pod-frozen-ms")
			b.ReportMetric(ms(podTotal), "pod-total-ms")
			b.ReportMetric(ms(ownFrozen), "containerd-frozen-sum-ms")
			b.ReportMetric(ms(ownTotal), "containerd-total-sum-ms")
			b.ReportMetric(float64(podTotal)/float64(ownTotal), "ratio")
			b.Logf("%s, %d MiB x 2: nodeshim pod checkpoint frozen %.0f ms, total %.0f ms; containerd CheckpointContainer x2: frozen %.0f ms (sum), total %.0f ms (sum)",
				c.Version, mib, ms(podFrozen), ms(podTotal), ms(ownFrozen), ms(ownTotal))
		})
	}
}

// benchWaitCount waits until ctr's /count is above n.
func benchWaitCount(b *testing.B, ctr *runtimetest.Container, n int) {
	b.Helper()
	for {
		out, _, code := ctr.Exec(b, "cat", "/count")
		var c int
		if _, err := fmt.Sscan(out, &c); code == 0 && err == nil && c > n {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
