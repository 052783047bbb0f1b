package pressure

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/shim/source/sourcetest"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
)

// rtEnv runs the real container runtimes of the package's tests.
var rtEnv runtimetest.Env

func TestMain(m *testing.M) { os.Exit(rtEnv.Main(m)) }

// TestPodPressure runs real CRI pods under runc and crun in a kubepods
// tree with kubelet's cgroupfs naming below the harness's cgroup parent,
// and finds each one in the model's per-pod view by namespace and name,
// with its memory figures from the hierarchy that holds its memory cgroup
// (v1 on a hybrid node, said so) and PSI where its cgroup v2 directory
// has it.
func TestPodPressure(t *testing.T) {
	c := rtEnv.Containerd(t)
	cg2, err := cgroup.FindMount("/proc")
	if err != nil {
		t.Fatal(err)
	}
	memV1, err := cgroup.FindV1Mount("/proc", "memory")
	if err != nil && !errors.Is(err, cgroup.ErrNoV1Hierarchy) {
		t.Fatal(err)
	}
	type started struct {
		uid, name, cgroup string
	}
	var pods []started
	for i, h := range []string{runtimetest.RuntimeRunc, runtimetest.RuntimeCrun} {
		uid := fmt.Sprintf("0000000%d-aaaa-bbbb-cccc-%012d", i, time.Now().UnixNano()%1e12)
		rel := c.CgroupRoot + "/kubepods/burstable/pod" + uid
		p := c.RunPod(t, runtimetest.PodOptions{Namespace: "pressure-test", Name: "pod-" + h, UID: uid, RuntimeHandler: h, CgroupParent: rel})
		// Some memory in use: a tmpfs-backed file stays charged to the pod.
		p.Run(t, runtimetest.ContainerOptions{Command: []string{"sh", "-c", "head -c 8m /dev/zero > /dev/shm/x; sleep 3600"}})
		pods = append(pods, started{uid, "pod-" + h, rel})
	}

	m := status.New(nil)
	sourcetest.Run(t, m, &Source{ProcRoot: "/proc", KubeletRoot: t.TempDir(), Interval: 50 * time.Millisecond, PodInterval: 50 * time.Millisecond,
		PodParent: c.CgroupRoot, RuntimeEndpoint: c.Address, Logger: discard})
	d := sourcetest.WaitFor(t, m, func(d status.Document) bool {
		// The pods are read on demand, as GET /pods does; the next
		// snapshot has this read.
		m.RefreshPods(t.Context())
		if d.Pressure == nil || d.Pressure.Pods == nil {
			return false
		}
		named := 0
		for _, p := range d.Pressure.Pods.Items {
			if p.Namespace == "pressure-test" && p.Memory.WorkingSetBytes >= 8<<20 {
				named++
			}
		}
		return named == len(pods)
	})
	// The first read loaded the kernel pass, and the monitor's condition
	// says so.
	settled := sourcetest.WaitFor(t, m, func(d status.Document) bool {
		c, _ := d.Condition(status.TypePressureMonitor)
		return !strings.Contains(c.Message, "(at the first read)")
	})
	if c, _ := settled.Condition(status.TypePressureMonitor); !strings.Contains(c.Message, "a BPF cgroup iterator reads each pod's PSI and memory counters in one kernel pass (CONFIG_HZ ") {
		t.Errorf("%s after the first read of the pods: %s", status.TypePressureMonitor, c.Message)
	}
	view := d.Pressure.Pods
	if view.Driver != string(cgroup.Cgroupfs) || !strings.HasSuffix(view.Kubepods, c.CgroupRoot+"/kubepods") {
		t.Errorf("kubepods %s (%s)", view.Kubepods, view.Driver)
	}
	wantSource := cgroup.SourceV2
	if memV1 != "" {
		wantSource = cgroup.SourceV1
	}
	for _, want := range pods {
		var got *status.PodPressure
		for i := range view.Items {
			if view.Items[i].UID == want.uid {
				got = &view.Items[i]
			}
		}
		if got == nil {
			t.Fatalf("pod %s missing from %+v", want.uid, view.Items)
		}
		if got.Name != want.name || got.QOS != string(cgroup.Burstable) || got.Cgroup != want.cgroup || got.Containers < 1 ||
			got.Memory.Source != wantSource || got.Memory.Unknown != "" {
			t.Errorf("pod %s: %+v", want.name, got)
		}
		// PSI is there exactly where the runtime put the pod in the
		// cgroup v2 hierarchy (runc does on a hybrid node; crun, run
		// without the unified hierarchy here, does not).
		_, statErr := os.Stat(filepath.Join(cg2.Path, want.cgroup, "memory.pressure"))
		for _, p := range got.PSI {
			if (p.Unknown == "") != (statErr == nil) {
				t.Errorf("pod %s: %s PSI %+v with %s/memory.pressure: %v", want.name, p.Resource, p, want.cgroup, statErr)
			}
		}
		t.Logf("%s: %s working set %d from %s, memory PSI %+v", want.name, got.Cgroup, got.Memory.WorkingSetBytes, got.Memory.Source, got.PSI[1])
	}
}
