package restore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/criu/pod"
	"github.com/nodeshim/nodeshim/runtimes/restoring"
	"github.com/nodeshim/nodeshim/runtimes/restoring/restore"
	"github.com/nodeshim/nodeshim/shim/checkpoint"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// Handler is the runtime handler of nodeshim-runc in the tests' containerd.
const Handler = "nodeshim"

// EnvContainerd24 names the directory of containerd v2.4.2's binaries
// (mk/runtime.mk builds them): the release without a restore of its own.
const EnvContainerd24 = "NODESHIM_CONTAINERD24"

var (
	// rt runs containerd 2.3.7 (NODESHIM_CONTAINERD2), rt24 v2.4.2, each
	// with the nodeshim handler.
	rt, rt24 runtimetest.Env
	// bins holds nodeshim-runc, nodeshim-runc-restore and the config.
	bins string
	// ckptDir is the handler's checkpoint directory, workDir its work
	// directory.
	ckptDir, workDir string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "nodeshim-runc-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bins, ckptDir, workDir = filepath.Join(dir, "bin"), filepath.Join(dir, "checkpoints"), filepath.Join(dir, "work")
	for _, d := range []string{bins, ckptDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	// The binaries as the DaemonSet installs them, built once.
	for _, b := range []string{"nodeshim-runc", "nodeshim-runc-restore"} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(bins, b), "github.com/nodeshim/nodeshim/cmd/"+b).CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", b, err, out)
			return 1
		}
	}
	runc, err := exec.LookPath(runtimetest.RuntimeRunc)
	if err == nil {
		cfg := restoring.Config{Runtime: runc, CheckpointDir: ckptDir, WorkDir: workDir, Criu: os.Getenv("NODESHIM_CRIU")}
		b, _ := json.Marshal(cfg)
		if err := os.WriteFile(restoring.ConfigPath(filepath.Join(bins, "nodeshim-runc")), b, 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	handlers := []runtimetest.Handler{{
		Name: Handler, Binary: filepath.Join(bins, "nodeshim-runc"),
		PodAnnotations: []string{"restore.nodeshim.io/*"},
	}}
	rt.Handlers2, rt24.Handlers2 = handlers, handlers
	rt24.Containerd2Dir = os.Getenv(EnvContainerd24)
	code := m.Run()
	if err := rt24.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if err := rt.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}

// counter is the workload: a shell that counts into /count.
var counter = []string{"sh", "-c", "i=0; while true; do i=$((i+1)); echo $i > /count.new; mv /count.new /count; sleep 0.1; done"}

// count reads /count in ctr, -1 when it has none yet.
func count(t *testing.T, ctr *runtimetest.Container) int {
	t.Helper()
	out, _, code := ctr.Exec(t, "cat", "/count")
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if code != 0 || err != nil {
		return -1
	}
	return n
}

// waitCount waits until ctr has counted past n and returns the count.
func waitCount(t *testing.T, ctr *runtimetest.Container, n int) int {
	t.Helper()
	var c int
	testutil.Eventually(t, fmt.Sprintf("%s counts past %d", ctr.Name, n), func() error {
		if c = count(t, ctr); c <= n {
			return fmt.Errorf("count %d", c)
		}
		return nil
	})
	return c
}

// runCounter runs the counter container "counter" in a new runc pod and
// waits until it has counted to 10.
func runCounter(t *testing.T, c *runtimetest.Containerd) (*runtimetest.Container, int) {
	t.Helper()
	pod := c.RunPod(t, runtimetest.PodOptions{})
	ctr := pod.Run(t, runtimetest.ContainerOptions{Name: "counter", Command: counter})
	return ctr, waitCount(t, ctr, 10)
}

// criCheckpoint has containerd's CRI checkpoint ctr into the checkpoint
// directory, as kubelet's Checkpoint API does, and returns the archive's
// name there.
func criCheckpoint(t testing.TB, c *runtimetest.Containerd, ctr *runtimetest.Container) string {
	t.Helper()
	name := fmt.Sprintf("checkpoint-%s-%s.tar", ctr.Name, ctr.ID[:12])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.Runtime.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{
		ContainerId: ctr.ID, Location: filepath.Join(ckptDir, name), Timeout: 60,
	}); err != nil {
		t.Fatalf("CRI checkpoint %s: %v\n%s", ctr.Name, err, c.Log())
	}
	t.Cleanup(func() { os.Remove(filepath.Join(ckptDir, name)) })
	return name
}

// nodeshimCheckpoint checkpoints ctr with nodeshim's checkpoint service
// into the checkpoint directory and returns the archive's name there.
func nodeshimCheckpoint(t testing.TB, c *runtimetest.Containerd, ctr *runtimetest.Container) string {
	t.Helper()
	bin := criutest.Require(t)
	svc := checkpoint.New(checkpoint.Options{
		Settings: func() checkpoint.Settings {
			return checkpoint.Settings{Enabled: true, Dir: ckptDir, DefaultTimeout: time.Minute, RuntimeEndpoint: c.Address}
		},
		FindCriu: func() (criu.Binary, error) { return bin, nil },
		LockDir:  filepath.Join(t.TempDir(), "locks"),
		Model:    status.New(nil),
	})
	defer svc.Close()
	ref := criu.ContainerRef{Namespace: ctr.Pod.Config.Metadata.Namespace, Pod: ctr.Pod.Config.Metadata.Name, Container: ctr.Name}
	res, err := svc.Checkpoint(context.Background(), ref, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(res.Path) })
	return filepath.Base(res.Path)
}

// restorePod runs a pod under the nodeshim handler whose annotation
// names ckpt.
func restorePod(t *testing.T, c *runtimetest.Containerd, ckpt string) *runtimetest.Pod {
	t.Helper()
	return c.RunPod(t, runtimetest.PodOptions{RuntimeHandler: Handler, Annotations: map[string]string{restoring.AnnotationCheckpoint: ckpt}})
}

// checkRestored creates and starts "counter" in pod (with a command that
// would count from 1 if it were started fresh) and checks that it counts
// on from at least before.
func checkRestored(t *testing.T, pod *runtimetest.Pod, before int) {
	t.Helper()
	ctr := startRestored(t, pod, "counter", before)
	ctr.Stop(t, 0)
	if st := ctr.Status(t); st.State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Fatalf("stopped restored container is %v", st.State)
	}
	ctr.Remove(t)
	checkNothingLeft(t)
}

// startRestored creates and starts container name in pod and checks
// that it counts on from at least before and writes to its CRI log.
func startRestored(t *testing.T, pod *runtimetest.Pod, name string, before int) *runtimetest.Container {
	t.Helper()
	start := time.Now()
	ctr := pod.CreateContainer(t, runtimetest.ContainerOptions{Name: name, Command: counter})
	created := time.Since(start)
	ctr.Start(t)
	t.Logf("CreateContainer (restore) %s, StartContainer %s", created, time.Since(start)-created)
	if st := ctr.Status(t); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("restored container is %v", st.State)
	}
	restored := waitCount(t, ctr, -1)
	if restored < before {
		t.Fatalf("restored container counts %d, below %d seen before the checkpoint: it was started fresh", restored, before)
	}
	next := waitCount(t, ctr, restored)
	t.Logf("count %d before the checkpoint, %d then %d restored", before, restored, next)
	// The counter's stdout pipe is the new shim's: what it writes after
	// the restore is in the new container's log.
	if out, _, code := ctr.Exec(t, "sh", "-c", "echo after-restore > /proc/1/fd/1"); code != 0 {
		t.Fatalf("write to the restored process's stdout: %s", out)
	}
	testutil.Eventually(t, "the restored process's stdout reaches the CRI log", func() error {
		if !strings.Contains(ctr.Logs(t), "after-restore") {
			return fmt.Errorf("log: %q", ctr.Logs(t))
		}
		return nil
	})
	return ctr
}

// checkNothingLeft checks that no restore left a work directory (the
// cached CRIU version stays).
func checkNothingLeft(t *testing.T) {
	t.Helper()
	ents, err := os.ReadDir(workDir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != ".criu-version" {
			t.Errorf("the work directory %s keeps %s", workDir, e.Name())
		}
	}
}

// TestRestoresContainerdCheckpoint: containerd's own CRI checkpoint of a
// running counter restores in a new pod under the nodeshim handler, and
// the counter goes on.
func TestRestoresContainerdCheckpoint(t *testing.T) {
	c := rt.Containerd2(t)
	criutest.Require(t)
	ctr, before := runCounter(t, c)
	name := criCheckpoint(t, c, ctr)
	ctr.Stop(t, 0)
	ctr.Remove(t)
	checkRestored(t, restorePod(t, c, name), before)
}

// TestRestoresOnContainerd24: containerd v2.4.2 has no restore of its
// own; under the nodeshim handler nodeshim's archive and containerd's CRI
// checkpoint of a counter restore there all the same.
func TestRestoresOnContainerd24(t *testing.T) {
	if os.Getenv(EnvContainerd24) == "" {
		testutil.Skip(t, "needs containerd v2.4.2: %s names the directory of its binaries (make test builds it under .tools)", EnvContainerd24)
	}
	c := rt24.Containerd2(t)
	if !strings.Contains(c.Version, "v2.4.") {
		t.Fatalf("%s runs %s, not v2.4", EnvContainerd24, c.Version)
	}
	for _, tc := range []struct {
		name       string
		checkpoint func(testing.TB, *runtimetest.Containerd, *runtimetest.Container) string
	}{{"nodeshim", nodeshimCheckpoint}, {"containerd CRI", criCheckpoint}} {
		t.Run(tc.name, func(t *testing.T) {
			ctr, before := runCounter(t, c)
			name := tc.checkpoint(t, c, ctr)
			ctr.Stop(t, 0)
			ctr.Remove(t)
			checkRestored(t, restorePod(t, c, name), before)
		})
	}
}

// TestRestoresPodCheckpoint: nodeshim's pod checkpoint (criu/pod) of a
// two-container pod, named by its directory, restores both containers in
// a new pod under the nodeshim handler, each from its own archive, both
// counters going on.
func TestRestoresPodCheckpoint(t *testing.T) {
	c := rt.Containerd2(t)
	bin := criutest.Require(t)
	pod := c.RunPod(t, runtimetest.PodOptions{})
	var before []int
	for _, name := range []string{"counter", "sidecar"} {
		ctr := pod.Run(t, runtimetest.ContainerOptions{Name: name, Command: counter})
		before = append(before, waitCount(t, ctr, 10))
	}
	res := podCheckpoint(t, c, bin, pod, seal.Config{})
	t.Logf("pod checkpoint %s: frozen %s, total %s", filepath.Base(res.Path), res.Frozen, res.Total)
	if err := pod.Remove(); err != nil {
		t.Fatal(err)
	}
	restored := restorePod(t, c, filepath.Base(res.Path))
	for i, name := range []string{"counter", "sidecar"} {
		startRestored(t, restored, name, before[i])
	}
	if err := restored.Remove(); err != nil {
		t.Fatal(err)
	}
	checkNothingLeft(t)
}

// TestRestoresPodCheckpointInitContainerRunsAgain: a pod whose init
// container had finished when it was checkpointed is restored as kubelet
// creates it: the init container, under the annotation, runs again (its
// new command's output in its log, exit code 0), then the counter is
// restored and counts on.
func TestRestoresPodCheckpointInitContainerRunsAgain(t *testing.T) {
	c := rt.Containerd2(t)
	bin := criutest.Require(t)
	pod := c.RunPod(t, runtimetest.PodOptions{})
	setup := pod.Run(t, runtimetest.ContainerOptions{Name: "setup", Command: []string{"sh", "-c", "echo setup-ran"}})
	waitExited(t, setup)
	ctr := pod.Run(t, runtimetest.ContainerOptions{Name: "counter", Command: counter})
	before := waitCount(t, ctr, 10)
	res := podCheckpoint(t, c, bin, pod, seal.Config{})
	if err := pod.Remove(); err != nil {
		t.Fatal(err)
	}
	restored := restorePod(t, c, filepath.Base(res.Path))
	again := restored.Run(t, runtimetest.ContainerOptions{Name: "setup", Command: []string{"sh", "-c", "echo setup-ran-again"}})
	waitExited(t, again)
	if logs := again.Logs(t); !strings.Contains(logs, "setup-ran-again") {
		t.Fatalf("the init container did not run again: its log is %q", logs)
	}
	startRestored(t, restored, "counter", before)
	if err := restored.Remove(); err != nil {
		t.Fatal(err)
	}
	checkNothingLeft(t)
}

// podCheckpoint takes a pod checkpoint of pod into the checkpoint
// directory through nodeshim's checkpoint service with CRIU bin, its
// archives sealed as sealing says; the checkpoint is removed when t ends.
func podCheckpoint(t *testing.T, c *runtimetest.Containerd, bin criu.Binary, p *runtimetest.Pod, sealing seal.Config) pod.Result {
	t.Helper()
	svc := checkpoint.New(checkpoint.Options{
		Settings: func() checkpoint.Settings {
			return checkpoint.Settings{Enabled: true, Dir: ckptDir, DefaultTimeout: time.Minute, RuntimeEndpoint: c.Address, Seal: sealing}
		},
		FindCriu: func() (criu.Binary, error) { return bin, nil },
		LockDir:  filepath.Join(t.TempDir(), "locks"),
		Model:    status.New(nil),
	})
	defer svc.Close()
	res, err := svc.CheckpointPod(t.Context(), checkpoint.PodRef{Namespace: p.Config.Metadata.Namespace, Name: p.Config.Metadata.Name}, checkpoint.PodOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(res.Path) })
	return res
}

// waitExited waits until ctr has exited with code 0.
func waitExited(t *testing.T, ctr *runtimetest.Container) {
	t.Helper()
	testutil.Eventually(t, ctr.Name+" exits 0", func() error {
		st := ctr.Status(t)
		if st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 0 {
			return fmt.Errorf("%v, exit code %d: %s", st.State, st.ExitCode, st.Message)
		}
		return nil
	})
}

// TestRestoresNodeshimCheckpoint: the same from nodeshim's archive, named
// by its absolute path under the checkpoint directory.
func TestRestoresNodeshimCheckpoint(t *testing.T) {
	c := rt.Containerd2(t)
	ctr, before := runCounter(t, c)
	name := nodeshimCheckpoint(t, c, ctr)
	ctr.Stop(t, 0)
	ctr.Remove(t)
	checkRestored(t, restorePod(t, c, filepath.Join(ckptDir, name)), before)
}

// createRaw creates container name in pod through CRI as kubelet would,
// with cmd and a memory limit (0: none), and returns it or the error.
func createRaw(t *testing.T, c *runtimetest.Containerd, pod *runtimetest.Pod, name string, cmd []string, memory int64) (*runtimetest.Container, error) {
	t.Helper()
	logDir := filepath.Join(pod.Config.LogDirectory, name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{runtimetest.LabelContainerName: name}
	for _, k := range []string{runtimetest.LabelPodName, runtimetest.LabelPodNamespace, runtimetest.LabelPodUID} {
		labels[k] = pod.Config.Labels[k]
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: runtimetest.BusyboxImage},
		Command:  cmd,
		Labels:   labels,
		LogPath:  filepath.Join(name, "0.log"),
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources:       &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: memory},
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: pod.Config.Linux.SecurityContext.NamespaceOptions},
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := c.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod.ID, Config: cfg, SandboxConfig: pod.Config})
	if err != nil {
		return nil, err
	}
	return &runtimetest.Container{ID: resp.ContainerId, Name: name, Pod: pod, LogPath: filepath.Join(logDir, "0.log")}, nil
}

// TestPlainWorkloadAsRunc: a pod without a checkpoint under the nodeshim
// handler behaves as under runc: it runs, execs, logs, is OOM-killed at
// its memory limit and is killed on stop, and its runtime state is runc's
// under the handler's root.
func TestPlainWorkloadAsRunc(t *testing.T) {
	c := rt.Containerd2(t)
	for _, handler := range []string{runtimetest.RuntimeRunc, Handler} {
		t.Run(handler, func(t *testing.T) {
			pod := c.RunPod(t, runtimetest.PodOptions{RuntimeHandler: handler})
			ctr := pod.Run(t, runtimetest.ContainerOptions{Name: "web", Command: []string{"sh", "-c", "echo hello from $(cat /proc/1/comm); exec sleep 1000"}})
			testutil.Eventually(t, "the log has the greeting", func() error {
				if l := ctr.Logs(t); !strings.Contains(l, "hello from sh") {
					return fmt.Errorf("log %q", l)
				}
				return nil
			})
			if out, _, code := ctr.Exec(t, "sh", "-c", "echo exec ok; exit 3"); out != "exec ok\n" || code != 3 {
				t.Errorf("exec: %q, exit %d", out, code)
			}
			if _, err := os.Stat(filepath.Join(c.RuntimeRoot(handler), ctr.ID, "state.json")); err != nil {
				t.Errorf("runc's state of the container under the handler's root: %v", err)
			}
			if _, err := os.Stat(restoring.MarkerPath(c.RuntimeRoot(handler), "runc", ctr.ID)); err == nil {
				t.Errorf("a fresh container has a restore marker")
			}
			ctr.Stop(t, 0)
			if st := ctr.Status(t); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 137 {
				t.Errorf("killed container: %v, exit %d, want exited 137", st.State, st.ExitCode)
			}
			ctr.Remove(t)

			oom, err := createRaw(t, c, pod, "hog", []string{"sh", "-c", "tail /dev/zero"}, 32<<20)
			if err != nil {
				t.Fatal(err)
			}
			oom.Start(t)
			code := oom.Wait(t)
			if st := oom.Status(t); st.Reason != "OOMKilled" || code != 137 {
				t.Errorf("memory hog: reason %q, exit %d; want OOMKilled, 137", st.Reason, code)
			}
			oom.Remove(t)
		})
	}
}

// TestRefusalsThroughCRI: a checkpoint outside the checkpoint directory,
// of another machine, or of another container fails the container's
// start with the reason in the CRI error, and nothing of it stays: no
// work directory, no runtime state.
func TestRefusalsThroughCRI(t *testing.T) {
	c := rt.Containerd2(t)
	here := restore.ArchOfGOARCH(goruntime.GOARCH)
	other := restore.ArchAARCH64
	if here == other {
		other = restore.ArchX86_64
	}
	outside := filepath.Join(t.TempDir(), "elsewhere.tar")
	if err := os.WriteFile(outside, restore.BuildArchive(t, "counter", runtimetest.BusyboxImage, here), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, arch := range map[string]restore.Arch{"other-arch.tar": other, "right-arch.tar": here} {
		p := filepath.Join(ckptDir, name)
		if err := os.WriteFile(p, restore.BuildArchive(t, "counter", runtimetest.BusyboxImage, arch), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(p) })
	}
	link := filepath.Join(ckptDir, "link.tar")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(link) })
	for _, tc := range []struct{ name, ckpt, ctr, want string }{
		{"an absolute path outside", outside, "counter", "is not under the checkpoint directory"},
		{"a relative path outside", "../" + filepath.Base(filepath.Dir(outside)) + "/elsewhere.tar", "counter", "checkpoint refused"},
		{"a symlink outside", "link.tar", "counter", "checkpoint refused"},
		{"another machine", "other-arch.tar", "counter", "task of machine " + other.String()},
		{"another container", "right-arch.tar", "sidecar", `checkpoint is of container "counter", this container is "sidecar"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := restorePod(t, c, tc.ckpt)
			ctr, err := createRaw(t, c, pod, tc.ctr, counter, 0)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_, err = c.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr.ID})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("start = %v; want a refusal naming %q", err, tc.want)
			}
			t.Log(err)
			if _, err := os.Stat(filepath.Join(c.RuntimeRoot(Handler), ctr.ID)); err == nil {
				t.Errorf("the runtime keeps state of the refused container")
			}
			checkNothingLeft(t)
		})
	}
}

// TestBinaries runs the built binaries as the shim would, without a
// containerd: a call that is not a restore is runc's own (its version),
// and a create whose bundle names a checkpoint but whose command line the
// wrapper cannot read fails, naming why in the runtime log, instead of
// starting the container fresh.
func TestBinaries(t *testing.T) {
	runc := testutil.RequireBinary(t, runtimetest.RuntimeRunc)
	want, err := exec.Command(runc, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	got, err := exec.Command(filepath.Join(bins, "nodeshim-runc"), "--version").Output()
	if err != nil || string(got) != string(want) {
		t.Fatalf("nodeshim-runc --version: %v\n%s\nwant runc's:\n%s", err, got, want)
	}

	dir := t.TempDir()
	bundle, log := filepath.Join(dir, "bundle"), filepath.Join(dir, "log.json")
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		t.Fatal(err)
	}
	spec := `{"ociVersion":"1.2.0","root":{"path":"rootfs"},"annotations":{"` + restoring.AnnotationCheckpoint + `":"x.tar"}}`
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bins, "nodeshim-runc"), "--root", filepath.Join(dir, "root"), "--log", log, "--log-format", "json",
		"create", "--bundle", bundle, "--future-flag", "v", "abc")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("create with an unreadable command line succeeded: %s", out)
	}
	b, _ := os.ReadFile(log)
	if !strings.Contains(string(b), `"level":"error"`) || !strings.Contains(string(b), "a create that names a checkpoint") {
		t.Errorf("runtime log %q, stderr %q: want the refusal", b, out)
	}
}
