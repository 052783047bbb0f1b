//go:build nodevm

package nodetest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// kernelReport is the part of `nodeshim report -o json` the node checks.
type kernelReport struct {
	Kind   string `json:"kind"`
	Kernel struct {
		Release string `json:"release"`
		Cgroup  struct {
			Mode string            `json:"mode"`
			V2   string            `json:"v2"`
			V1   map[string]string `json:"v1"`
		} `json:"cgroup"`
	} `json:"kernel"`
	Requirements []struct {
		ID       string `json:"id"`
		Verdict  string `json:"verdict"`
		Evidence string `json:"evidence"`
	} `json:"requirements"`
}

// TestNodeReport: `nodeshim report -o json` on the node finds it pure
// cgroup v2 (cgroup2 alone at /sys/fs/cgroup, the freezer as
// cgroup.freeze, PSI with triggers) and ready for checkpoints (CRIU 4.1.1
// found, new enough, `criu check` passing) and for pre-copy (dirty memory
// tracked), with no probe undecided. It
// runs once nodeshim serve's own report is served, so that the two do not
// share the node's two CPUs, with a probe timeout for TCG (every probe
// is 10-50 times slower there than on a node).
func TestNodeReport(t *testing.T) {
	requireNode(t)
	testutil.Eventually(t, "nodeshim serve's GET /report", func() error {
		return getJSON(t, "/report", new(kernelReport))
	})
	out := run(t, nodeshimBin, "report", "-o", "json", "--probe-timeout", "30s")
	var r kernelReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("nodeshim report -o json: %v: %.300s", err, out)
	}
	if r.Kind != "KernelReport" {
		t.Errorf("kind %q, want KernelReport", r.Kind)
	}
	if c := r.Kernel.Cgroup; c.Mode != "unified" || c.V2 != cgroupRoot || len(c.V1) != 0 {
		t.Errorf("cgroup mode %q, v2 %q, v1 %v; want unified at %s alone", c.Mode, c.V2, c.V1, cgroupRoot)
	}
	verdicts := map[string]string{}
	for _, req := range r.Requirements {
		verdicts[req.ID] = req.Verdict
		switch {
		case req.Verdict == "Unknown":
			t.Errorf("%s: Unknown on the node: %s", req.ID, req.Evidence)
		case strings.HasPrefix(req.ID, "criu.") || req.Verdict != "Supported":
			t.Logf("%s: %s: %s", req.ID, req.Verdict, req.Evidence)
		}
	}
	for _, id := range []string{
		"cgroup.v2", "cgroup.controllers", "cgroup.v2-controllers", "cgroup.cpu-stat", "cgroup.freezer",
		"psi.enabled", "psi.triggers", "mounts.overlayfs",
		"criu.binary", "criu.version", "criu.check",
		// Pre-copy's readiness: the node's kernel tracks dirty memory.
		"criu.feature.mem_dirty_track",
	} {
		if v := verdicts[id]; v != "Supported" {
			t.Errorf("%s: %q on the node, want Supported", id, v)
		}
	}
}

// TestCRIPodUnderKubepodsSlice: a pod sandbox and a container started
// through CRI (crictl) with kubelet's systemd cgroup parent land where a
// kubeadm node puts them: the pod in
// kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice,
// the container in its cri-containerd-<id>.scope, a transient systemd unit,
// with its memory limit, its own PSI files, memory.events and cgroup.freeze.
func TestCRIPodUnderKubepodsSlice(t *testing.T) {
	requireNode(t)
	p := runPod(t, "slice")
	const limit = 64 << 20
	c := p.runContainer(t, containerOptions{Name: "counter", Command: counterCommand, MemoryLimit: limit})
	c.waitCount(t, 0)
	in := c.inspect(t)
	if want := p.Slice + ":cri-containerd:" + c.ID; in.Info.RuntimeSpec.Linux.CgroupsPath != want {
		t.Errorf("OCI spec cgroupsPath %q, want the systemd driver's %q", in.Info.RuntimeSpec.Linux.CgroupsPath, want)
	}
	scope := "cri-containerd-" + c.ID + ".scope"
	dir := filepath.Join(p.Dir(), scope)
	cg, err := readFile(fmt.Sprintf("/proc/%d/cgroup", in.Info.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if want := "0::" + strings.TrimPrefix(dir, cgroupRoot); cg != want {
		t.Errorf("/proc/%d/cgroup is %q, want %q", in.Info.Pid, cg, want)
	}
	for _, f := range []string{"cgroup.freeze", "memory.events", "memory.pressure", "cpu.pressure", "io.pressure", "memory.max"} {
		for _, d := range []string{p.Dir(), dir} {
			if _, err := os.Stat(filepath.Join(d, f)); err != nil {
				t.Errorf("%v", err)
			}
		}
	}
	if got, err := readFile(filepath.Join(dir, "memory.max")); err != nil || got != strconv.Itoa(limit) {
		t.Errorf("%s/memory.max: %q, %v; want %d", dir, got, err, limit)
	}
	if out, err := runErr("systemctl", "is-active", scope); err != nil || strings.TrimSpace(out) != "active" {
		t.Errorf("systemctl is-active %s: %q, %v: the systemd driver should have made the container a transient unit", scope, out, err)
	}
	if out, err := runErr("systemctl", "show", "-P", "Slice", scope); err != nil || strings.TrimSpace(out) != p.Slice {
		t.Errorf("systemctl show -P Slice %s: %q, %v; want %s", scope, out, err, p.Slice)
	}
	t.Logf("pod %s in %s, container %s in %s", p.ID[:12], p.Dir(), c.ID[:12], scope)
}

// getJSON decodes GET path from nodeshim serve's socket into v.
func getJSON(t *testing.T, path string, v any) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://nodeshim"+path, nil)
	if err != nil {
		return err
	}
	resp, err := testutil.UnixHTTPClient(nodeshimSock).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("GET %s: %w: %.300s", path, err, b)
	}
	return nil
}

// getPods reads GET /pods from nodeshim serve's socket.
func getPods(t *testing.T) (status.PodPressures, error) {
	t.Helper()
	var pp status.PodPressures
	err := getJSON(t, "/pods", &pp)
	return pp, err
}

// psiTotal is the "some" total of a pod's PSI file.
func psiTotal(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || fields[0] != "some" {
			continue
		}
		for _, kv := range fields[1:] {
			if v, ok := strings.CutPrefix(kv, "total="); ok {
				return strconv.ParseUint(v, 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("%s: no some total", path)
}

// TestPodPressureFromOwnPSI: nodeshim serve's GET /pods on the node reads
// each pod from its own slice with the systemd driver: named through CRI,
// Burstable, memory from cgroup v2, PSI for cpu, memory and io with
// nothing unknown. A pod kept busy (three spinning shells on two CPUs)
// stalls on CPU in its own cpu.pressure, and what nodeshim reports for it
// is that file's figure, not the node's nor the other pod's.
func TestPodPressureFromOwnPSI(t *testing.T) {
	requireNode(t)
	quiet := runPod(t, "quiet")
	quiet.runContainer(t, containerOptions{Name: "counter", Command: counterCommand, MemoryLimit: 64 << 20})
	busy := runPod(t, "busy")
	busy.runContainer(t, containerOptions{Name: "spin", MemoryLimit: 64 << 20,
		Command: []string{"sh", "-c", "for i in 1 2 3; do (while :; do :; done) & done; wait"}})
	var pp status.PodPressures
	var busyItem, quietItem status.PodPressure
	testutil.Eventually(t, "GET /pods lists both pods with CPU stall in the busy one", func() error {
		var err error
		if pp, err = getPods(t); err != nil {
			return err
		}
		busyItem, quietItem = status.PodPressure{}, status.PodPressure{}
		for _, it := range pp.Items {
			switch it.UID {
			case busy.UID:
				busyItem = it
			case quiet.UID:
				quietItem = it
			}
		}
		if busyItem.UID == "" || quietItem.UID == "" {
			return fmt.Errorf("pods %d listed, the busy one found %v, the quiet one %v", len(pp.Items), busyItem.UID != "", quietItem.UID != "")
		}
		if cpu := psiOf(busyItem, "cpu"); cpu == nil || cpu.Some.TotalMicroseconds == 0 {
			return fmt.Errorf("no CPU stall in the busy pod yet: %+v", busyItem.PSI)
		}
		return nil
	})
	if pp.Driver != "systemd" || pp.Kubepods != filepath.Join(cgroupRoot, "kubepods.slice") || pp.Unknown != "" {
		t.Errorf("pods read with driver %q from %q (unknown %q); want systemd from %s/kubepods.slice", pp.Driver, pp.Kubepods, pp.Unknown, cgroupRoot)
	}
	for _, c := range []struct {
		p  *pod
		it status.PodPressure
	}{{busy, busyItem}, {quiet, quietItem}} {
		it := c.it
		if it.Namespace != c.p.Namespace || it.Name != c.p.Name {
			t.Errorf("pod %s named %s/%s, want %s/%s (through CRI)", it.UID, it.Namespace, it.Name, c.p.Namespace, c.p.Name)
		}
		if strings.ToLower(it.QOS) != "burstable" || !strings.HasSuffix(it.Cgroup, c.p.Slice) {
			t.Errorf("pod %s: QoS %q, cgroup %q; want burstable in %s", it.UID, it.QOS, it.Cgroup, c.p.Slice)
		}
		if it.Memory.Source != "cgroup v2" || it.Memory.Unknown != "" || it.Memory.UsageBytes == 0 {
			t.Errorf("pod %s memory: %+v; want usage from cgroup v2", it.UID, it.Memory)
		}
		for _, res := range []string{"cpu", "memory", "io"} {
			psi := psiOf(it, res)
			if psi == nil || psi.Unknown != "" {
				t.Errorf("pod %s %s PSI: %+v; want read from its own %s.pressure", it.UID, res, psi, res)
			}
		}
		// nodeshim's figure is the pod's own file's: never above what the
		// file says after it (a pass's total may be one PSI period behind).
		file, err := psiTotal(filepath.Join(c.p.Dir(), "cpu.pressure"))
		if err != nil {
			t.Fatal(err)
		}
		if got := psiOf(it, "cpu"); got != nil && got.Some.TotalMicroseconds > file {
			t.Errorf("pod %s cpu some total %d µs from nodeshim, above its own cpu.pressure's %d read after", it.UID, got.Some.TotalMicroseconds, file)
		}
		t.Logf("pod %s: cpu some total %d µs (file %d), avg10 %.2f", c.p.Name, psiOf(it, "cpu").Some.TotalMicroseconds, file, psiOf(it, "cpu").Some.Avg10)
	}
	// The quiet pod's stall is its own, not the busy one's.
	quietFile, err := psiTotal(filepath.Join(quiet.Dir(), "cpu.pressure"))
	if err != nil {
		t.Fatal(err)
	}
	if q, b := psiOf(quietItem, "cpu").Some.TotalMicroseconds, psiOf(busyItem, "cpu").Some.TotalMicroseconds; q > quietFile || q == b {
		t.Errorf("quiet pod cpu total %d µs (its file %d), busy pod %d µs: the pods' figures should be their own files'", q, quietFile, b)
	}
}

func psiOf(it status.PodPressure, resource string) *status.PSI {
	for i := range it.PSI {
		if it.PSI[i].Resource == resource {
			return &it.PSI[i]
		}
	}
	return nil
}

// checkpointResult is the part of `nodeshim checkpoint -o json` read here.
type checkpointResult struct {
	Path          string  `json:"path"`
	FrozenSeconds float64 `json:"frozenSeconds"`
	TotalSeconds  float64 `json:"totalSeconds"`
	PagesWritten  uint64  `json:"pagesWritten"`
}

// TestCheckpointThroughNodeAPIRestoreThroughCRI: a counter container in a
// pod under kubepods.slice is checkpointed through nodeshim serve's node
// API (`nodeshim checkpoint --namespace --pod --container`, CRIU 4.1.1
// freezing it through cgroup.freeze) and keeps running; its archive made
// into a checkpoint image (`nodeshim checkpoint image`), imported with
// ctr, is restored by containerd 2.2 through CRI CreateContainer and
// StartContainer in a new pod, and the counter goes on from where it was.
// serve runs with checkpoint.preDumpRounds 2 here: the node's kernel
// tracks dirty memory, so the checkpoint's record says two pre-dump
// rounds ran, and the container restored from their images counts on.
func TestCheckpointThroughNodeAPIRestoreThroughCRI(t *testing.T) {
	requireNode(t)
	configDropIn(t, "60-pre-dump.conf", map[string]any{"checkpoint": map[string]any{"preDumpRounds": 2}})
	p := runPod(t, "ckpt")
	c := p.runContainer(t, containerOptions{Name: "counter", Command: counterCommand, MemoryLimit: 64 << 20})
	token, before := c.waitCount(t, 5)

	start := time.Now()
	out, err := runErr(nodeshimBin, "checkpoint", "--namespace", p.Namespace, "--pod", p.Name, "--container", c.Name,
		"--socket", nodeshimSock, "-o", "json")
	tCheckpoint := time.Since(start)
	if err != nil {
		diagnoseCheckpoint(t, c)
		t.Fatal(err)
	}
	var ck checkpointResult
	if err := json.Unmarshal([]byte(out), &ck); err != nil {
		t.Fatalf("nodeshim checkpoint -o json: %v: %s", err, out)
	}
	if ck.Path == "" || ck.FrozenSeconds <= 0 || ck.PagesWritten == 0 {
		t.Errorf("checkpoint through the node API: %+v; want an archive with its frozen time and pages", ck)
	}
	if rec := lastCheckpointRecord(t); rec.Path != ck.Path || rec.PreDumpRounds != 2 || rec.PreDumpSkipped != "" {
		t.Errorf("checkpoint record %+v; want %s after 2 pre-dump rounds", rec, ck.Path)
	}
	// The workload runs on after its checkpoint.
	_, after := c.waitCount(t, before)

	ref := "localhost/nodeshim/counter-checkpoint:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	file := filepath.Join(t.TempDir(), "counter.oci.tar")
	start = time.Now()
	run(t, nodeshimBin, "checkpoint", "image", ck.Path, "--tag", ref, "--output", file, "-o", "json")
	tImage := time.Since(start)
	c.stopRemove(t)
	start = time.Now()
	run(t, ctrBin, "-n", "k8s.io", "images", "import", file)
	tImport := time.Since(start)

	restored := runPod(t, "restored")
	start = time.Now()
	rc := restored.create(t, containerOptions{Name: "counter", Image: ref})
	run(t, crictlBin, "start", rc.ID)
	tRestore := time.Since(start)
	if st := rc.inspect(t).Status.State; st != "CONTAINER_RUNNING" {
		t.Fatalf("container restored from %s is %s", ref, st)
	}
	restoredToken, first := rc.waitCount(t, 0)
	if restoredToken != token || first < before {
		t.Fatalf("restored counter %s at %d; before the checkpoint %s at %d: it started afresh", restoredToken, first, token, before)
	}
	_, next := rc.waitCount(t, first)
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	t.Logf("counter %d before the checkpoint, %d after it, %d then %d restored", before, after, first, next)
	t.Logf("checkpoint through the node API %s (frozen %.3fs, CRIU total %.3fs, %d pages); checkpoint image %s; ctr import %s; CRI create+start (restore) %s",
		ms(tCheckpoint), ck.FrozenSeconds, ck.TotalSeconds, ck.PagesWritten, ms(tImage), ms(tImport), ms(tRestore))
}

// diagnoseCheckpoint logs what tells a failed checkpoint's cause apart:
// the container's namespaces as its OCI spec joins them and as its process
// has them, containerd's own checkpoint of it (runc and CRIU without
// nodeshim), and CRIU's logs nodeshim left.
func diagnoseCheckpoint(t *testing.T, c *container) {
	t.Helper()
	out := run(t, crictlBin, "inspect", "-o", "json", c.ID)
	var in struct {
		Info struct {
			Pid         int `json:"pid"`
			RuntimeSpec struct {
				Linux struct {
					Namespaces []struct{ Type, Path string } `json:"namespaces"`
				} `json:"linux"`
			} `json:"runtimeSpec"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(out), &in); err != nil {
		t.Errorf("crictl inspect: %v", err)
		return
	}
	for _, ns := range in.Info.RuntimeSpec.Linux.Namespaces {
		name := ns.Type
		if n, ok := map[string]string{"network": "net", "mount": "mnt"}[name]; ok {
			name = n
		}
		own, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", in.Info.Pid, name))
		joined := ""
		if ns.Path != "" {
			joined, _ = os.Readlink(ns.Path)
			if fi, err := os.Stat(ns.Path); err == nil {
				joined += fmt.Sprintf(" (stat %v)", fi.Sys())
			}
		}
		t.Logf("spec namespace %s path %q %s; process %d has %s", ns.Type, ns.Path, joined, in.Info.Pid, own)
	}
	exported := filepath.Join(t.TempDir(), "containerd.tar")
	if out, err := runErr(crictlBin, "checkpoint", "--export="+exported, c.ID); err != nil {
		t.Logf("containerd's own checkpoint (crictl checkpoint) fails too: %v %s", err, out)
	} else {
		t.Logf("containerd's own checkpoint (crictl checkpoint --export) of the same container succeeds")
	}
	var logs []string
	_ = filepath.WalkDir("/var/lib/nodeshim", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(d.Name(), ".log") {
			logs = append(logs, p)
		}
		return nil
	})
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		t.Logf("%s (last lines):\n%s", l, strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
	if b, err := os.ReadFile("/proc/modules"); err == nil {
		var mods []string
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 0 {
				mods = append(mods, f[0])
			}
		}
		t.Logf("modules loaded: %s", strings.Join(mods, " "))
	}
}
