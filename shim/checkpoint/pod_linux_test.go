package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/archive"
	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/criu/pod"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/shim/checkpoint/retention"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
)

// counterPod runs a pod in c with a finished init container and two
// counters, and waits until both count.
func counterPod(t *testing.T, c *runtimetest.Containerd) (*runtimetest.Pod, []*runtimetest.Container, []int) {
	t.Helper()
	p := c.RunPod(t, runtimetest.PodOptions{})
	initCtr := p.Run(t, runtimetest.ContainerOptions{Name: "setup", Command: []string{"true"}})
	if code := initCtr.Wait(t); code != 0 {
		t.Fatalf("init container exited %d", code)
	}
	var ctrs []*runtimetest.Container
	for _, n := range []string{"counter-a", "counter-b"} {
		ctrs = append(ctrs, p.Run(t, runtimetest.ContainerOptions{Name: n, Command: workload(0)}))
	}
	var counts []int
	for _, ctr := range ctrs {
		counts = append(counts, waitCount(t, ctr, 5))
	}
	return p, ctrs, counts
}

// TestCheckpointPod checkpoints a two-container pod of a real containerd
// 2.3.7 CRI through the service: one pod checkpoint whose manifest names
// the pod, its containers in order and its finished init container, with
// one valid container archive each, both dumped within the one interval
// the pod was frozen; the pod counts on after it; then containerd itself
// restores each container's archive through CRI and both counters go on
// from where they were.
func TestCheckpointPod(t *testing.T) {
	c := rt.Containerd2(t)
	bin := criutest.Require(t)
	p, ctrs, before := counterPod(t, c)
	dir := filepath.Join(t.TempDir(), "checkpoints")
	svc := containerdService(t, c, bin, dir, status.New(nil))
	ref := PodRef{Namespace: p.Config.Metadata.Namespace, Name: p.Config.Metadata.Name}
	res, err := svc.CheckpointPod(context.Background(), ref, PodOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: pod checkpoint %s, %d bytes, frozen %s (freezing %s), total %s", c.Version, res.Path, res.Size, res.Frozen, res.Freezing, res.Total)
	if want := pod.Name(ref.Namespace, ref.Name, res.Manifest.CheckpointedAt, 0); filepath.Base(res.Path) != want || filepath.Dir(res.Path) != dir {
		t.Errorf("pod checkpoint at %s, want %s in %s", res.Path, want, dir)
	}

	m, err := pod.ReadManifest(res.Path)
	if err != nil {
		t.Fatal(err)
	}
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct{ what, got, want string }{
		{"namespace", m.Namespace, ref.Namespace},
		{"name", m.Name, ref.Name},
		{"uid", m.UID, p.Config.Metadata.Uid},
		{"sandbox id", m.SandboxID, p.ID},
		{"hostname", m.Sandbox.Hostname, p.Config.Hostname},
		{"runtime handler", m.Sandbox.RuntimeHandler, p.RuntimeHandler},
		{"network namespace", m.Sandbox.Namespaces.Network, "POD"},
		{"pid namespace", m.Sandbox.Namespaces.PID, "CONTAINER"},
		{"ipc namespace", m.Sandbox.Namespaces.IPC, "POD"},
		{"cgroup parent", m.Sandbox.CgroupParent, p.Config.Linux.CgroupParent},
		{"kernel", m.Sandbox.Kernel, unix.ByteSliceToString(uts.Release[:])},
	} {
		if f.got != f.want {
			t.Errorf("manifest %s %q, want %q", f.what, f.got, f.want)
		}
	}
	if m.Sandbox.CRIUVersion == "" || m.Sandbox.Architecture == "" || len(m.Sandbox.Config) == 0 {
		t.Errorf("manifest sandbox %+v lacks the CRIU version, the architecture or the config", m.Sandbox)
	}
	if len(m.InitContainers) != 1 || m.InitContainers[0].Name != "setup" || m.InitContainers[0].ExitCode != 0 {
		t.Errorf("init containers %+v, want the finished setup", m.InitContainers)
	}
	if len(m.Containers) != 2 || m.Containers[0].Name != "counter-a" || m.Containers[1].Name != "counter-b" {
		t.Fatalf("containers %+v, want counter-a then counter-b", m.Containers)
	}
	// One freeze: every dump lies within the one frozen interval.
	if !m.FrozenAt.Before(m.ThawedAt) {
		t.Errorf("frozen at %s, thawed at %s", m.FrozenAt, m.ThawedAt)
	}
	for i, mc := range m.Containers {
		if mc.ID != ctrs[i].ID || mc.Image != runtimetest.BusyboxImage {
			t.Errorf("container %s: id %s image %s, want %s %s", mc.Name, mc.ID, mc.Image, ctrs[i].ID, runtimetest.BusyboxImage)
		}
		if mc.DumpStartedAt.Before(m.FrozenAt) || mc.DumpFinishedAt.After(m.ThawedAt) {
			t.Errorf("container %s dumped from %s to %s, outside the frozen interval %s .. %s", mc.Name,
				mc.DumpStartedAt.Format("15:04:05.000000"), mc.DumpFinishedAt.Format("15:04:05.000000"),
				m.FrozenAt.Format("15:04:05.000000"), m.ThawedAt.Format("15:04:05.000000"))
		}
		if want := archive.Name(criu.ContainerRef{Namespace: ref.Namespace, Pod: ref.Name, Container: mc.Name}, m.CheckpointedAt, 0); mc.Archive != want {
			t.Errorf("archive %s, want kubelet's name %s", mc.Archive, want)
		}
		f, err := os.Open(filepath.Join(res.Path, mc.Archive))
		if err != nil {
			t.Fatal(err)
		}
		_, err = archive.Validate(f)
		f.Close()
		if err != nil {
			t.Errorf("archive of %s: %v", mc.Name, err)
		}
		checkStatusDump(t, filepath.Join(res.Path, mc.Archive), ctrs[i])
	}
	checkPrivate(t, dir, res.Path)

	// The pod counts on.
	var counted []int
	for _, ctr := range ctrs {
		counted = append(counted, waitCount(t, ctr, count(t, ctr)))
	}
	t.Logf("counts %v before, %v after the checkpoint", before, counted)

	// The originals are gone before the copies run.
	for _, ctr := range ctrs {
		ctr.Stop(t, 0)
		ctr.Remove(t)
	}
	for i, mc := range m.Containers {
		restoreNamedThroughCRI(t, c, mc.Name, filepath.Join(res.Path, mc.Archive), before[i])
	}
}

// checkPrivate checks that the checkpoint directory holds only the pod
// checkpoint, root-only: no work entry is left, the directory is 0700 and
// every file in it 0600.
func checkPrivate(t *testing.T, dir, path string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if filepath.Join(dir, e.Name()) != path {
			t.Errorf("%s holds %s beside the pod checkpoint", dir, e.Name())
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("%s mode %v, want 0700", path, fi.Mode())
	}
	files, err := os.ReadDir(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		i, err := f.Info()
		if err != nil {
			t.Fatal(err)
		}
		if !i.Mode().IsRegular() || i.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want a 0600 file", f.Name(), i.Mode())
		}
	}
}

// TestCheckpointPodFailure: on the host's containerd 1.6, a pod checkpoint
// whose second container's CRIU dies fails, leaves nothing in the
// checkpoint directory, and thaws the pod, which counts on; an unknown pod
// is NotFound; a pod with a container that exited is Busy.
func TestCheckpointPodFailure(t *testing.T) {
	c := rt.Containerd(t)
	real := criutest.Require(t)
	p, ctrs, _ := counterPod(t, c)
	ref := PodRef{Namespace: p.Config.Metadata.Namespace, Name: p.Config.Metadata.Name}

	// A criu that dies at its second dump request (CRIU serves each dump
	// as "criu swrk FD").
	wrap := filepath.Join(t.TempDir(), "criu")
	state := filepath.Join(t.TempDir(), "dumps")
	script := fmt.Sprintf("#!/bin/sh\nif [ \"$1\" = swrk ]; then n=$(cat %s 2>/dev/null || echo 0); n=$((n+1)); echo $n > %s; [ $n -ge 2 ] && kill -9 $$; fi\nexec %s \"$@\"\n", state, state, real.Path)
	if err := os.WriteFile(wrap, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "checkpoints")
	svc := containerdService(t, c, criu.Binary{Path: wrap, Source: "configured"}, dir, status.New(nil))
	_, err := svc.CheckpointPod(context.Background(), ref, PodOptions{})
	if err == nil {
		t.Fatal("a pod checkpoint whose second dump's CRIU died succeeded")
	}
	t.Logf("failed as it should: %v", err)
	if !strings.Contains(err.Error(), "counter-b") {
		t.Errorf("error %v does not name the container whose dump failed", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("%s holds %v after a failed pod checkpoint", dir, names)
	}
	for _, ctr := range ctrs {
		n := count(t, ctr)
		waitCount(t, ctr, n)
	}

	// Once the failure is gone, the same pod checkpoints.
	good := containerdService(t, c, real, dir, status.New(nil))
	res, err := good.CheckpointPod(context.Background(), ref, PodOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := pod.ReadManifest(res.Path); err != nil || len(m.Containers) != 2 {
		t.Errorf("manifest %+v, %v", m, err)
	}

	// A deadline that ends while the pod is frozen (the second CRIU is
	// slow to start) aborts it the same way.
	slow := filepath.Join(t.TempDir(), "criu")
	state2 := filepath.Join(t.TempDir(), "dumps")
	script = fmt.Sprintf("#!/bin/sh\nif [ \"$1\" = swrk ]; then n=$(cat %s 2>/dev/null || echo 0); n=$((n+1)); echo $n > %s; [ $n -ge 2 ] && sleep 8; fi\nexec %s \"$@\"\n", state2, state2, real.Path)
	if err := os.WriteFile(slow, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	slowDir := filepath.Join(t.TempDir(), "checkpoints")
	model := status.New(nil)
	svc = containerdService(t, c, criu.Binary{Path: slow, Source: "configured"}, slowDir, model)
	// Meanwhile a checkpoint of one of the pod's containers is Busy.
	busyErr, podDone := make(chan error, 1), make(chan struct{})
	go func() {
		for {
			for _, c := range model.Snapshot().Conditions {
				if c.Type == status.TypeCheckpoint && strings.Contains(c.Message, "dumping container counter-b") {
					_, err := svc.Checkpoint(context.Background(), criu.ContainerRef{Namespace: ref.Namespace, Pod: ref.Name, Container: "counter-a"}, 0)
					busyErr <- err
					return
				}
			}
			select {
			case <-podDone:
				busyErr <- errors.New("the pod checkpoint ended before its dump of counter-b was seen")
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	// The deadline leaves the steps before the freeze seconds under load.
	_, err = svc.CheckpointPod(context.Background(), ref, PodOptions{Timeout: 5 * time.Second})
	close(podDone)
	if err := <-busyErr; !errors.Is(err, ErrBusy) {
		t.Errorf("container checkpoint during the pod's: %v, want Busy", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "counter-b") {
		t.Errorf("pod checkpoint past its deadline: %v, want DeadlineExceeded in the dump of counter-b", err)
	}
	t.Logf("aborted as it should: %v", err)
	if ents, _ := os.ReadDir(slowDir); len(ents) != 0 {
		t.Errorf("%s holds %d entries after an aborted pod checkpoint", slowDir, len(ents))
	}
	for _, ctr := range ctrs {
		waitCount(t, ctr, count(t, ctr))
	}

	// Retention keeps one pod checkpoint of the pod and removes the older
	// one as a unit; a work directory a killed nodeshim left is swept.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(dir, fmt.Sprintf(".nodeshim-work-%d-0123456789abcdef", dead.Process.Pid))
	if err := os.MkdirAll(filepath.Join(left, ".nodeshim-work-1-inner"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(left, pod.ManifestFile), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	keep1 := New(Options{
		Settings: func() Settings {
			return Settings{Enabled: true, Dir: dir, DefaultTimeout: time.Minute, RuntimeEndpoint: c.Address, Retention: retention.Policy{MaxPerContainer: 1}}
		},
		FindCriu: func() (criu.Binary, error) { return real, nil },
		LockDir:  filepath.Join(t.TempDir(), "locks"),
		Model:    status.New(nil),
	})
	t.Cleanup(func() { keep1.Close() })
	if _, err := keep1.ApplyRetention(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("work directory of a dead nodeshim left: %v", err)
	}
	// A checkpoint a second later has another name.
	time.Sleep(time.Until(res.Manifest.CheckpointedAt.Truncate(time.Second).Add(time.Second)))
	res2, err := keep1.CheckpointPod(context.Background(), ref, PodOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if e.Name() != retention.TrashDir {
			names = append(names, e.Name())
		}
	}
	if len(names) != 1 || names[0] != filepath.Base(res2.Path) {
		t.Errorf("after retention with maxPerContainer 1: %v, want only %s", names, filepath.Base(res2.Path))
	}

	if _, err := good.CheckpointPod(context.Background(), PodRef{Namespace: ref.Namespace, Name: "no-such-pod"}, PodOptions{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown pod: %v, want NotFound", err)
	}
	ctrs[1].Stop(t, 0)
	if _, err := good.CheckpointPod(context.Background(), ref, PodOptions{}); !errors.Is(err, errdefs.ErrBusy) || !errors.Is(err, ErrPodNotRunning) {
		t.Errorf("pod with an exited container: %v, want Busy", err)
	}
}

// TestCheckpointPodSealRefusals: a pod checkpoint is refused before it
// reaches the runtime when the sealing keys do not load, and when it
// asks for checkpoint images of archives that are to be encrypted
// (an image would hold their plain text).
func TestCheckpointPodSealRefusals(t *testing.T) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		seal  seal.Config
		image string
		want  string
	}{
		{"missing signing key", seal.Config{SigningKey: filepath.Join(dir, "missing.pem")}, "", "missing.pem"},
		{"image of an encrypted archive", seal.Config{Recipients: []string{id.Recipient().String()}}, "registry.example/ckpt:1", "make encrypted images of the archives with nodeshim checkpoint image --encryption-key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := New(Options{
				Settings: func() Settings {
					// No runtime listens there: a refusal comes first.
					return Settings{Enabled: true, Dir: filepath.Join(dir, "checkpoints"), DefaultTimeout: time.Minute,
						RuntimeEndpoint: "unix://" + filepath.Join(dir, "none.sock"), Seal: tc.seal}
				},
				FindCriu: func() (criu.Binary, error) { return criu.Binary{}, errors.New("not needed") },
				LockDir:  filepath.Join(dir, "locks"),
				Model:    status.New(nil),
			})
			defer svc.Close()
			_, err := svc.CheckpointPod(context.Background(), PodRef{Namespace: "default", Name: "web"}, PodOptions{ImageRef: tc.image})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckpointPod = %v; want a refusal naming %q", err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(dir, "checkpoints")); err == nil {
				t.Errorf("a refused pod checkpoint created its directory")
			}
		})
	}
}
