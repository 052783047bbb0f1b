package restore_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
)

// BenchmarkContainerStart is the time from CreateContainer to a started
// container (StartContainer returned), in one pod per handler, under
// plain runc and under the nodeshim handler (nodeshim-runc exec'ing the
// same runc): the wrapper's overhead on a normal start. The two handlers
// take turns going first, so that load on the machine hits both alike.
func BenchmarkContainerStart(b *testing.B) {
	c := rt.Containerd2(b)
	pods := map[string]*runtimetest.Pod{}
	for _, h := range []string{runtimetest.RuntimeRunc, Handler} {
		pods[h] = c.RunPod(b, runtimetest.PodOptions{RuntimeHandler: h})
	}
	took := map[string]time.Duration{}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		order := []string{runtimetest.RuntimeRunc, Handler}
		if i%2 == 1 {
			// Each goes first in every other round: what the previous
			// container's teardown leaves running hits both alike.
			order[0], order[1] = order[1], order[0]
		}
		for _, h := range order {
			start := time.Now()
			ctr := pods[h].Run(b, runtimetest.ContainerOptions{Command: []string{"sleep", "1000"}})
			took[h] += time.Since(start)
			b.StopTimer()
			ctr.Stop(b, 0)
			ctr.Remove(b)
			b.StartTimer()
		}
	}
	for h, d := range took {
		b.ReportMetric(float64(d.Milliseconds())/float64(b.N), "ms/start-"+h)
	}
}

// BenchmarkRestoreStart is the time from CreateContainer to a running
// container, each in a new pod: a cold start of the counter (runc), the
// counter restored by the nodeshim handler from containerd's CRI
// checkpoint of it, and containerd 2.3.7's own restore of the same
// archive through CreateContainer (the archive as the image).
func BenchmarkRestoreStart(b *testing.B) {
	c := rt.Containerd2(b)
	criutest.Require(b)
	pod := c.RunPod(b, runtimetest.PodOptions{})
	ctr := pod.Run(b, runtimetest.ContainerOptions{Name: "counter", Command: counter})
	waitCountB(b, ctr)
	name := criCheckpoint(b, c, ctr)
	ctr.Stop(b, 0)
	ctr.Remove(b)
	pod.Remove()

	took := map[string]time.Duration{}
	logged := false
	run := func(kind string, handler string, ann map[string]string, image string) {
		b.StopTimer()
		pod := c.RunPod(b, runtimetest.PodOptions{RuntimeHandler: handler, Annotations: ann})
		b.StartTimer()
		start := time.Now()
		ctr := pod.Run(b, runtimetest.ContainerOptions{Name: "counter", Command: counter, Image: image})
		took[kind] += time.Since(start)
		b.StopTimer()
		if st := ctr.Status(b); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			b.Fatalf("%s: container is %v", kind, st.State)
		}
		if kind == "nodeshim" && !logged {
			// The phases of one restore, from the runtime log.
			logged = true
			logPath := filepath.Join(c.Dir, "state/io.containerd.runtime.v2.task", runtimetest.CRINamespace, ctr.ID, "log.json")
			if l, err := os.ReadFile(logPath); err == nil {
				b.Logf("%s", l)
			}
		}
		ctr.Stop(b, 0)
		ctr.Remove(b)
		if err := pod.Remove(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportAllocs()
	b.ResetTimer()
	kinds := []func(){
		func() { run("cold", runtimetest.RuntimeRunc, nil, "") },
		func() { run("nodeshim", Handler, map[string]string{"restore.nodeshim.io/checkpoint": name}, "") },
		func() { run("containerd", runtimetest.RuntimeRunc, nil, ckptDir+"/"+name) },
	}
	for i := 0; i < b.N; i++ {
		// A different one first in each round.
		for k := range kinds {
			kinds[(i+k)%len(kinds)]()
		}
	}
	for k, d := range took {
		b.ReportMetric(float64(d.Milliseconds())/float64(b.N), "ms/"+k)
	}
}

// waitCountB waits until the counter has written a count.
func waitCountB(b *testing.B, ctr *runtimetest.Container) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		if out, _, code := ctr.Exec(b, "cat", "/count"); code == 0 && out != "" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatal("the counter never counted")
}
