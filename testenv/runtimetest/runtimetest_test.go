package runtimetest

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// rt is this package's shared runtimes; TestCloseLeavesNothing uses its own.
var rt Env

func TestMain(m *testing.M) {
	code := m.Run()
	if err := rt.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 && testing.Verbose() {
		ti := rt.Timings()
		fmt.Printf("timings: build images %v, containerd start %v, ctr import %v, containerd 2.x start %v, ctr import %v, podman load %v\n",
			ti.BuildImages, ti.ContainerdStart, ti.ContainerdLoad, ti.Containerd2Start, ti.Containerd2Load, ti.PodmanLoad)
	}
	os.Exit(code)
}

// readOCI returns the entries of an OCI layout tar by name.
func readOCI(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = b
	}
}

func TestWriteImageLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "img.tar")
	files := append(baseFiles(), file{name: "bin/hello", mode: 0o755, typ: tar.TypeReg, data: []byte("#!/bin/sh\n")},
		file{name: "bin/sh", mode: 0o777, typ: tar.TypeSymlink, linkname: "/bin/hello"})
	if err := writeImage(path, "localhost/x/y:z", files, []string{"sh"}); err != nil {
		t.Fatal(err)
	}
	oci := readOCI(t, path)
	if string(oci["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %q", oci["oci-layout"])
	}
	var idx index
	if err := json.Unmarshal(oci["index.json"], &idx); err != nil {
		t.Fatal(err)
	}
	if len(idx.Manifests) != 1 {
		t.Fatalf("index has %d manifests", len(idx.Manifests))
	}
	md := idx.Manifests[0]
	for _, a := range []string{annotationContainerdName, annotationRefName} {
		if md.Annotations[a] != "localhost/x/y:z" {
			t.Errorf("index annotation %s = %q", a, md.Annotations[a])
		}
	}
	blob := func(d descriptor) []byte {
		t.Helper()
		b, ok := oci[blobPath(d.Digest)]
		if !ok {
			t.Fatalf("no blob %s", d.Digest)
		}
		if digestOf(b) != d.Digest || int64(len(b)) != d.Size {
			t.Fatalf("blob %s: digest %s, size %d, descriptor says %d", d.Digest, digestOf(b), len(b), d.Size)
		}
		return b
	}
	var man manifest
	if err := json.Unmarshal(blob(md), &man); err != nil {
		t.Fatal(err)
	}
	var cfg imageConfig
	if err := json.Unmarshal(blob(man.Config), &cfg); err != nil {
		t.Fatal(err)
	}
	layer := blob(man.Layers[0])
	if cfg.RootFS.DiffIDs[0] != digestOf(layer) {
		t.Errorf("diff_id %s, layer %s", cfg.RootFS.DiffIDs[0], digestOf(layer))
	}
	tr := tar.NewReader(bytes.NewReader(layer))
	got := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = h.Linkname
		if !h.ModTime.Equal(epoch) {
			t.Errorf("%s: mtime %v", h.Name, h.ModTime)
		}
	}
	if got["bin/sh"] != "/bin/hello" || got["tmp/"] != "" {
		t.Errorf("layer entries: %v", got)
	}

	// Reproducible: the same inputs give the same bytes.
	again := filepath.Join(t.TempDir(), "img.tar")
	if err := writeImage(again, "localhost/x/y:z", files, []string{"sh"}); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(path)
	b, _ := os.ReadFile(again)
	if !bytes.Equal(a, b) {
		t.Error("two builds of the same image differ")
	}
}

func TestParseCRILog(t *testing.T) {
	tests := []struct {
		name, in, want string
		err            bool
	}{
		{name: "empty", in: "", want: ""},
		{name: "full lines", in: "2024-01-01T00:00:00.1Z stdout F ok\n2024-01-01T00:00:00.2Z stderr F err x\n", want: "ok\nerr x\n"},
		{name: "partial", in: "t stdout P ab\nt stdout F cd\n", want: "abcd\n"},
		{name: "empty full line", in: "t stdout F\n", want: "\n"},
		{name: "bad stream", in: "t stdin F x\n", err: true},
		{name: "bad tag", in: "t stdout X x\n", err: true},
		{name: "short", in: "garbage\n", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseCRILog([]byte(tt.in))
			if (err != nil) != tt.err {
				t.Fatalf("err = %v, want error %v", err, tt.err)
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func FuzzParseCRILog(f *testing.F) {
	f.Add([]byte("2024-01-01T00:00:00.1Z stdout F ok\n"))
	f.Add([]byte("t stdout P a\nt stderr F b\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := ParseCRILog(data)
		if err == nil && len(out) > len(data) {
			t.Errorf("%d bytes of text from %d bytes of log", len(out), len(data))
		}
	})
}

// containerds are the two containerd peers, by version.
var containerds = []struct {
	name string
	get  func(testing.TB) *Containerd
}{{"1.6", rt.Containerd}, {"2.x", rt.Containerd2}}

func TestContainerdPods(t *testing.T) {
	for _, peer := range containerds {
		t.Run(peer.name, func(t *testing.T) { containerdPods(t, peer.get(t)) })
	}
}

func containerdPods(t *testing.T, c *Containerd) {
	t.Logf("%s", c.Version)
	handlers := []string{RuntimeRunc, RuntimeCrun}
	if c.flavor.v2 {
		handlers = handlers[:1] // see configTOML3
	}
	for _, handler := range handlers {
		t.Run(handler, func(t *testing.T) {
			start := time.Now()
			pod := c.RunPod(t, PodOptions{Namespace: "ns1", RuntimeHandler: handler})
			podTime := time.Since(start)
			st := pod.Status(t)
			if st.State != runtimeapi.PodSandboxState_SANDBOX_READY {
				t.Fatalf("pod state %v", st.State)
			}
			if st.GetNetwork().GetIp() == "" {
				t.Errorf("pod has no IP on the CNI bridge: %v", st.Network)
			}
			if st.Labels[LabelPodNamespace] != "ns1" || st.Labels[LabelPodName] != pod.Config.Metadata.Name {
				t.Errorf("pod labels %v", st.Labels)
			}

			// A container that runs to completion: its output in the log.
			start = time.Now()
			once := pod.Run(t, ContainerOptions{Name: "once", Command: []string{"sh", "-c", "echo ok; echo err >&2; exit 3"}})
			if code := once.Wait(t); code != 3 {
				t.Errorf("exit code %d, want 3", code)
			}
			t.Logf("RunPodSandbox %v; create, start and exit of a container %v", podTime, time.Since(start))
			if got := once.Logs(t); got != "ok\nerr\n" && got != "err\nok\n" {
				t.Errorf("logs %q", got)
			}

			// A long-running one: exec into it, see kubelet's labels.
			long := pod.Run(t, ContainerOptions{Name: "long", Command: []string{"sleep", "3600"}})
			out, _, code := long.Exec(t, "sh", "-c", "echo $((6*7)); cat /proc/1/cmdline | tr '\\0' ' '")
			if code != 0 || !strings.HasPrefix(out, "42\n") {
				t.Errorf("exec: %q, exit %d", out, code)
			}
			lst := long.Status(t)
			if lst.State != runtimeapi.ContainerState_CONTAINER_RUNNING || lst.Labels[LabelContainerName] != "long" || lst.Labels[LabelPodUID] != pod.Config.Metadata.Uid {
				t.Errorf("container state %v labels %v", lst.State, lst.Labels)
			}
			// The runtime's own view, through its state root.
			state, err := exec.Command(handler, "--root", c.RuntimeRoot(handler), "state", long.ID).Output()
			if err != nil || !strings.Contains(string(state), `"running"`) {
				t.Errorf("%s --root %s state %s: %v: %s", handler, c.RuntimeRoot(handler), long.ID, err, state)
			}
			long.Stop(t, 0)
			long.Remove(t)
		})
	}
}

func TestCrictl(t *testing.T) {
	for _, peer := range containerds {
		t.Run(peer.name, func(t *testing.T) { crictlPods(t, peer.get(t)) })
	}
}

func crictlPods(t *testing.T, c *Containerd) {
	pod := c.RunPod(t, PodOptions{HostNetwork: true})
	out, err := c.Crictl(t, "pods", "--id", pod.ID, "-q", "--no-trunc").CombinedOutput()
	if err != nil {
		t.Fatalf("crictl pods: %v: %s", err, out)
	}
	if strings.TrimSpace(string(out)) != pod.ID {
		t.Errorf("crictl pods: %q, want %s", out, pod.ID)
	}
}

func TestPodman(t *testing.T) {
	p := rt.Podman(t)
	for _, runtime := range []string{RuntimeRunc, RuntimeCrun} {
		t.Run(runtime, func(t *testing.T) {
			start := time.Now()
			res := p.Run(t, RunOptions{Runtime: runtime, Command: []string{"sh", "-c", "echo ok; ulimit -n"}})
			t.Logf("podman run --rm %v", time.Since(start))
			if res.ExitCode != 0 || !strings.HasPrefix(res.Stdout, "ok\n") {
				t.Fatalf("podman run: %+v", res)
			}
		})
	}
}

// TestCloseLeavesNothing runs a pod and a podman container on an Env of its
// own, closes it, and looks for anything left on the host.
func TestCloseLeavesNothing(t *testing.T) {
	var env Env
	c := env.Containerd(t)
	c2 := env.Containerd2(t)
	p := env.Podman(t)
	func() {
		// A sub-test so that its cleanups (pod removal) run before Close.
		t.Run("use", func(t *testing.T) {
			for _, c := range []*Containerd{c, c2} {
				pod := c.RunPod(t, PodOptions{})
				ctr := pod.Run(t, ContainerOptions{Command: []string{"sleep", "3600"}})
				ctr.Exec(t, "true")
			}
			p.Run(t, RunOptions{Detach: true, Command: []string{"sleep", "3600"}})
		})
	}()
	dir, id, addr, addr2 := env.dir, env.id, c.Address, c2.Address
	var socks []string
	for sb := range c.sandbox {
		socks = append(socks, c.shimSocket(sb))
	}
	if err := env.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", dir, err)
	}
	mounts, err := mountsUnder(dir)
	if err != nil || len(mounts) > 0 {
		t.Errorf("mounts left under %s: %v %v", dir, mounts, err)
	}
	for _, a := range []string{addr, addr2} {
		procs, err := processesWith(a)
		if err != nil || len(procs) > 0 {
			t.Errorf("processes of %s left: %v %v", a, procs, err)
		}
	}
	cgs, err := cgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range cgs {
		if _, err := os.Stat(filepath.Join(m, "nsrt-"+id)); err == nil {
			t.Errorf("cgroup %s/nsrt-%s left", m, id)
		}
	}
	for _, c := range []*Containerd{c, c2} {
		if _, err := netlink.LinkByName(c.Bridge); err == nil {
			t.Errorf("bridge %s left", c.Bridge)
		}
	}
	for _, s := range socks {
		if existed(s) {
			t.Errorf("shim socket %s left", s)
		}
	}
	if ents, err := os.ReadDir(cniResultsDir); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), c.Network+"-") || strings.HasPrefix(e.Name(), c2.Network+"-") {
				t.Errorf("CNI result %s left", e.Name())
			}
		}
	}
}
