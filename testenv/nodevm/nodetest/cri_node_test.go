//go:build nodevm

package nodetest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/testenv/nodevm"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// The node's programs and sockets (see testenv/nodevm).
var (
	crictlBin    = filepath.Join(nodevm.NodeBin, "crictl")
	ctrBin       = filepath.Join(nodevm.NodeBin, "ctr")
	nodeshimBin  = filepath.Join(nodevm.NodeBin, "nodeshim")
	nodeshimSock = filepath.Join(nodevm.NodeshimRoot, "nodeshim.sock")
)

// cgroupRoot is the node's cgroup2 mount.
const cgroupRoot = "/sys/fs/cgroup"

// counterCommand writes a rising count to /count every 100 ms, as the host's
// CRI checkpoint tests' counter does, after a token read once at start
// from the kernel's random UUID: a restored counter keeps its token, one
// started afresh from the same image has another.
var counterCommand = []string{"sh", "-c", "read r < /proc/sys/kernel/random/uuid; i=0; while true; do i=$((i+1)); echo $r $i > /count; sleep 0.1; done"}

func TestMain(m *testing.M) {
	if _, ok := testutil.InGuest(); ok {
		// The test images (no registry is reachable), once for every scenario.
		if err := importTestImages(ctrBin); err != nil {
			fmt.Fprintln(os.Stderr, "nodetest:", err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

// importTestImages imports the test images of NodeLib into the CRI
// namespace of the containerd that answers on its socket, with ctr.
func importTestImages(ctr string) error {
	imgs, _ := filepath.Glob(filepath.Join(nodevm.NodeLib, "images", "*.tar"))
	if len(imgs) == 0 {
		return fmt.Errorf("no test images under %s", nodevm.NodeLib)
	}
	for _, img := range imgs {
		if out, err := exec.Command(ctr, "-n", runtimetest.CRINamespace, "images", "import", img).CombinedOutput(); err != nil {
			return fmt.Errorf("%s images import %s: %w: %s", ctr, img, err, out)
		}
	}
	return nil
}

// requireNode gates t on running in the test node.
func requireNode(t *testing.T) {
	t.Helper()
	if l := testutil.RequireGuest(t); l != nodevm.TestName {
		testutil.Skip(t, "needs the test node of testenv/nodevm, not the %s guest", l)
	}
}

// run runs a program and returns its standard output; it fails t with
// standard error when the program fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := runErr(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func runErr(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// writeJSON writes v as a JSON file in t's temporary directory.
func writeJSON(t *testing.T, name string, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// pod is a pod sandbox run through crictl as kubelet runs a Burstable pod
// with the systemd cgroup driver.
type pod struct {
	ID, UID, Name, Namespace string
	// Slice is the pod's systemd slice, kubelet's cgroup parent.
	Slice string
	// config is the crictl pod config file.
	config string
	labels map[string]string
}

// Dir is the pod's cgroup directory.
func (p *pod) Dir() string {
	return filepath.Join(cgroupRoot, "kubepods.slice", "kubepods-burstable.slice", p.Slice)
}

// runPod runs a pod named name in namespace default, with kubelet's labels,
// log directory and cgroup parent (kubepods-burstable-pod<uid, _ for ->.slice),
// and stops and removes it when t ends.
func runPod(t *testing.T, name string) *pod {
	t.Helper()
	return runPodOn(t, name, "")
}

// runPodOn runs a pod as runPod does with the runtime handler named
// handler (containerd's default for "").
func runPodOn(t *testing.T, name, handler string) *pod {
	t.Helper()
	u := randomHex(16)
	uid := u[:8] + "-" + u[8:12] + "-" + u[12:16] + "-" + u[16:20] + "-" + u[20:]
	p := &pod{UID: uid, Name: name + "-" + u[:6], Namespace: "default",
		Slice: "kubepods-burstable-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice"}
	p.labels = map[string]string{
		runtimetest.LabelPodName: p.Name, runtimetest.LabelPodNamespace: p.Namespace, runtimetest.LabelPodUID: p.UID,
	}
	logDir := filepath.Join("/var/log/pods", p.Namespace+"_"+p.Name+"_"+p.UID)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	p.config = writeJSON(t, "pod.json", map[string]any{
		"metadata":      map[string]any{"name": p.Name, "namespace": p.Namespace, "uid": p.UID},
		"hostname":      p.Name,
		"log_directory": logDir,
		"labels":        p.labels,
		"linux": map[string]any{
			"cgroup_parent": p.Slice,
			// Network POD (0), PID CONTAINER (1), IPC POD (0), as kubelet.
			"security_context": map[string]any{"namespace_options": map[string]any{"network": 0, "pid": 1, "ipc": 0}},
		},
	})
	args := []string{"runp", p.config}
	if handler != "" {
		args = []string{"runp", "--runtime", handler, p.config}
	}
	p.ID = strings.TrimSpace(run(t, crictlBin, args...))
	t.Cleanup(func() {
		if _, err := runErr(crictlBin, "stopp", p.ID); err != nil {
			t.Error(err)
		}
		if _, err := runErr(crictlBin, "rmp", "-f", p.ID); err != nil {
			t.Error(err)
		}
	})
	return p
}

// container is a container of a pod, created through crictl.
type container struct {
	ID, Name string
	pod      *pod
}

// containerOptions describe a container: its image (the busybox test
// image by default, or a checkpoint to restore), command and limits.
type containerOptions struct {
	Name    string
	Image   string
	Command []string
	// MemoryLimit is memory.max in bytes; 0 for none.
	MemoryLimit int64
	// SeccompLocalhost is the path of a Localhost seccomp profile, as
	// kubelet passes it; "" for the runtime's default.
	SeccompLocalhost string
	// Mounts are bind mounts, container path to host path.
	Mounts map[string]string
}

// create creates a container in p as kubelet does (its labels, a log
// path) without starting it.
func (p *pod) create(t *testing.T, o containerOptions) *container {
	t.Helper()
	if o.Image == "" {
		o.Image = runtimetest.BusyboxImage
	}
	labels := map[string]string{runtimetest.LabelContainerName: o.Name}
	for k, v := range p.labels {
		labels[k] = v
	}
	cfg := map[string]any{
		"metadata": map[string]any{"name": o.Name},
		"image":    map[string]any{"image": o.Image},
		"log_path": o.Name + "/0.log",
		"labels":   labels,
	}
	if o.Command != nil {
		cfg["command"] = o.Command
	}
	var mounts []map[string]any
	for ctr, host := range o.Mounts {
		mounts = append(mounts, map[string]any{"container_path": ctr, "host_path": host})
	}
	if mounts != nil {
		cfg["mounts"] = mounts
	}
	linux := map[string]any{}
	if o.MemoryLimit > 0 {
		linux["resources"] = map[string]any{"memory_limit_in_bytes": o.MemoryLimit, "cpu_shares": 102}
	}
	if o.SeccompLocalhost != "" {
		// CRI's SecurityProfile: profile_type Localhost (2).
		linux["security_context"] = map[string]any{"seccomp": map[string]any{"profile_type": 2, "localhost_ref": o.SeccompLocalhost}}
	}
	if len(linux) > 0 {
		cfg["linux"] = linux
	}
	id := strings.TrimSpace(run(t, crictlBin, "create", p.ID, writeJSON(t, "container-"+o.Name+".json", cfg), p.config))
	return &container{ID: id, Name: o.Name, pod: p}
}

// runContainer creates and starts a container in p.
func (p *pod) runContainer(t *testing.T, o containerOptions) *container {
	t.Helper()
	c := p.create(t, o)
	run(t, crictlBin, "start", c.ID)
	return c
}

// inspection is the part of `crictl inspect` that the scenarios read.
type inspection struct {
	Status struct {
		State string `json:"state"`
	} `json:"status"`
	Info struct {
		Pid         int `json:"pid"`
		RuntimeSpec struct {
			Linux struct {
				CgroupsPath string `json:"cgroupsPath"`
			} `json:"linux"`
		} `json:"runtimeSpec"`
	} `json:"info"`
}

func (c *container) inspect(t *testing.T) inspection {
	t.Helper()
	var in inspection
	out := run(t, crictlBin, "inspect", "-o", "json", c.ID)
	if err := json.Unmarshal([]byte(out), &in); err != nil {
		t.Fatalf("crictl inspect %s: %v: %s", c.ID, err, out)
	}
	return in
}

// count reads the counter's /count in c: its start token and count.
func (c *container) count() (string, int, error) {
	out, err := runErr(crictlBin, "exec", c.ID, "cat", "/count")
	if err != nil {
		return "", 0, err
	}
	f := strings.Fields(out)
	if len(f) != 2 {
		return "", 0, fmt.Errorf("/count holds %q, want a token and a count", out)
	}
	n, err := strconv.Atoi(f[1])
	return f[0], n, err
}

// waitCount waits until c's counter is above n and returns its token and
// count.
func (c *container) waitCount(t *testing.T, n int) (string, int) {
	t.Helper()
	var token string
	var got int
	testutil.Eventually(t, fmt.Sprintf("counter of %s above %d", c.Name, n), func() error {
		tok, v, err := c.count()
		if err != nil {
			return err
		}
		if v <= n {
			return fmt.Errorf("count %d", v)
		}
		token, got = tok, v
		return nil
	})
	return token, got
}

// stopRemove stops and removes c.
func (c *container) stopRemove(t *testing.T) {
	t.Helper()
	run(t, crictlBin, "stop", "--timeout", "0", c.ID)
	run(t, crictlBin, "rm", c.ID)
}

// readFile reads a small file, trimmed.
func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
