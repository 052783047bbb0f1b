package pod

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"filippo.io/age"
	"go.uber.org/goleak"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/archive"
	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

func TestMain(m *testing.M) {
	// The test binary doubles as the counters the tests checkpoint.
	if os.Getenv(testworkload.EnvKind) == "count" {
		testworkload.RunCounter(os.Getenv(testworkload.EnvDir), os.Getenv(testworkload.EnvMiB), false)
		return
	}
	// A lazy pod checkpoint dumps its containers in goroutines of its
	// own: none may outlive a passing run.
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// podContainers are the containers of a test pod, in order.
var podContainers = []string{"app", "sidecar"}

// podCgroups makes a pod cgroup under root (a cgroup hierarchy with the
// freezer) with a cgroup for each of podContainers, all removed when t
// ends, after what runs in them (cleanups run last first); it returns the
// pod, without containers, and the containers' cgroups.
func podCgroups(t *testing.T, root string) (Pod, []string) {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	top := filepath.Join(root, "nodeshim-podtest-"+hex.EncodeToString(b[:]))
	p := Pod{Namespace: "default", Name: "web-0", UID: "u1", FreezeCgroup: filepath.Join(top, "pod")}
	t.Cleanup(func() {
		for _, d := range []string{p.FreezeCgroup, top} {
			testutil.Eventually(t, "remove "+d, func() error { return os.Remove(d) })
		}
	})
	var cgroups []string
	for _, name := range podContainers {
		cg := filepath.Join(p.FreezeCgroup, name)
		if err := os.MkdirAll(cg, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			testutil.Eventually(t, "remove "+cg, func() error { return os.Remove(cg) })
		})
		cgroups = append(cgroups, cg)
	}
	return p, cgroups
}

// fakePod makes a pod cgroup with two container cgroups under root (a
// cgroup hierarchy with the freezer) and a counter in each, as kubelet and
// runc lay out a pod; it returns the pod as Checkpoint takes it and the
// counters' directories. Everything is removed when t ends.
func fakePod(t *testing.T, root string) (Pod, []string) {
	t.Helper()
	p, cgroups := podCgroups(t, root)
	var dirs []string
	for i, name := range podContainers {
		cg := cgroups[i]
		pid, dir := testworkload.Start(t, "count", 4)
		if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			t.Fatal(err)
		}
		tg, err := criu.PIDTarget("/proc", pid, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		tg.Ref = criu.ContainerRef{Namespace: p.Namespace, Pod: p.Name, Container: name}
		tg.Container.FreezeCgroup = cg
		p.Containers = append(p.Containers, tg)
		dirs = append(dirs, dir)
	}
	for _, d := range dirs {
		testworkload.WaitCount(t, d, 2)
	}
	return p, dirs
}

// hierarchies are the freezers a pod's cgroup can be frozen through on
// this host: the cgroup v1 freezer hierarchy and the cgroup2 mount (the
// unified hierarchy of a hybrid node, /sys/fs/cgroup on a pure v2 one).
func hierarchies(t *testing.T) map[string]string {
	out := map[string]string{}
	if _, err := os.Stat("/sys/fs/cgroup/freezer/freezer.state"); err == nil || fileExists("/sys/fs/cgroup/freezer/tasks") {
		out["v1 freezer"] = "/sys/fs/cgroup/freezer"
	}
	for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if fileExists(filepath.Join(root, "cgroup.subtree_control")) {
			out["v2"] = root
			break
		}
	}
	if len(out) == 0 {
		testutil.Skip(t, "neither a v1 freezer hierarchy nor a cgroup2 mount")
	}
	return out
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestCheckpointFreezesOnce checkpoints two counters, each in its own
// cgroup below a pod cgroup, as one pod on each freezer this host has: the
// manifest names both archives in order, both archives are valid, both
// dumps lie in the one frozen interval, every cgroup is thawed after and
// both counters count on. A second checkpoint cancelled during the second
// dump fails, leaves the directory empty and thaws the pod too.
func TestCheckpointFreezesOnce(t *testing.T) {
	testutil.RequireRoot(t)
	bin := criutest.Require(t)
	for name, root := range hierarchies(t) {
		t.Run(name, func(t *testing.T) {
			p, dirs := fakePod(t, root)
			dir := filepath.Join(t.TempDir(), "checkpoints")
			res, err := Checkpoint(context.Background(), p, Options{Dir: dir, Criu: criu.Options{Binary: bin}})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: frozen %s (freezing %s), total %s", res.Path, res.Frozen, res.Freezing, res.Total)
			m, err := ReadManifest(res.Path)
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Containers) != 2 || m.Containers[0].Name != "app" || m.Containers[1].Name != "sidecar" {
				t.Fatalf("containers %+v", m.Containers)
			}
			for _, c := range m.Containers {
				if c.DumpStartedAt.Before(m.FrozenAt) || c.DumpFinishedAt.After(m.ThawedAt) {
					t.Errorf("%s dumped %s..%s, outside the frozen interval %s..%s", c.Name, c.DumpStartedAt, c.DumpFinishedAt, m.FrozenAt, m.ThawedAt)
				}
				f, err := os.Open(filepath.Join(res.Path, c.Archive))
				if err != nil {
					t.Fatal(err)
				}
				_, err = archive.Validate(f)
				f.Close()
				if err != nil {
					t.Errorf("%s: %v", c.Archive, err)
				}
			}
			if m.Sandbox.CRIUVersion == "" || m.Sandbox.Kernel == "" {
				t.Errorf("sandbox %+v", m.Sandbox)
			}
			assertThawed(t, p, dirs)

			// Cancelled while the second container is dumped.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			dir2 := filepath.Join(t.TempDir(), "checkpoints")
			_, err = Checkpoint(ctx, p, Options{Dir: dir2, Criu: criu.Options{Binary: bin}, Progress: func(i int, _ string, _ criu.Progress) {
				if i == 1 {
					cancel()
				}
			}})
			if !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled pod checkpoint: %v, want context.Canceled", err)
			}
			if ents, _ := os.ReadDir(dir2); len(ents) != 0 {
				t.Errorf("%s holds %d entries after a cancelled pod checkpoint", dir2, len(ents))
			}
			assertThawed(t, p, dirs)
		})
	}
}

// assertThawed checks that no cgroup of p is frozen and that every
// counter counts on.
func assertThawed(t *testing.T, p Pod, dirs []string) {
	t.Helper()
	for _, cg := range []string{p.FreezeCgroup, p.Containers[0].Container.FreezeCgroup, p.Containers[1].Container.FreezeCgroup} {
		if frozen(cg) {
			t.Errorf("%s left frozen", cg)
		}
	}
	for i, d := range dirs {
		n := len(testworkload.Counts(t, d))
		testworkload.WaitCount(t, d, n)
		testworkload.AssertRunning(t, p.Containers[i].Pid, d)
	}
}

// TestCheckpointRefuses: a pod that cannot be checkpointed as one is
// refused before anything is frozen.
func TestCheckpointRefuses(t *testing.T) {
	tg := func(container, cg string) criu.Target {
		return criu.Target{Pid: os.Getpid(), Ref: criu.ContainerRef{Namespace: "default", Pod: "web-0", Container: container},
			Container: criu.ContainerOptions{FreezeCgroup: cg}}
	}
	tests := []struct {
		name string
		pod  Pod
	}{
		{"no containers", Pod{Namespace: "default", Name: "web-0", FreezeCgroup: "/cg/pod"}},
		{"container outside the pod cgroup", Pod{Namespace: "default", Name: "web-0", FreezeCgroup: "/cg/pod", Containers: []criu.Target{tg("a", "/cg/other/a")}}},
		{"container cgroup is the pod's", Pod{Namespace: "default", Name: "web-0", FreezeCgroup: "/cg/pod", Containers: []criu.Target{tg("a", "/cg/pod")}}},
		{"container of another pod", Pod{Namespace: "default", Name: "web-1", FreezeCgroup: "/cg/pod", Containers: []criu.Target{tg("a", "/cg/pod/a")}}},
		{"pod name with a slash", Pod{Namespace: "default", Name: "a/b", FreezeCgroup: "/cg/pod", Containers: []criu.Target{tg("a", "/cg/pod/a")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := Checkpoint(context.Background(), tt.pod, Options{Dir: dir})
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%v: want class InvalidArgument", err)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("%s holds %d entries", dir, len(ents))
			}
		})
	}
	// A checkpoint image of an archive to be encrypted would hold its
	// plain text.
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	_, err = Checkpoint(context.Background(), Pod{Namespace: "default", Name: "web-0", FreezeCgroup: "/cg/pod", Containers: []criu.Target{tg("a", "/cg/pod/a")}},
		Options{Dir: dir, Criu: criu.Options{Seal: seal.WriteOptions{Recipients: []age.Recipient{id.Recipient()}}}, ImageRef: func(c string) string { return "registry.example/ckpt-" + c }})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("image of encrypted archives: %v, want class InvalidArgument", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("%s holds %d entries", dir, len(ents))
	}
	// A pod whose cgroup nodeshim cannot see is not supported here.
	_, err = Checkpoint(context.Background(), Pod{Namespace: "default", Name: "web-0", Containers: []criu.Target{tg("a", "/cg/pod/a")}}, Options{Dir: t.TempDir()})
	if !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("no pod cgroup: %v, want class NotSupported", err)
	}
}

// frozen reports whether the freezer cgroup dir is frozen or freezing.
func frozen(dir string) bool {
	ctl, on, _, _, _ := freezerFiles(dir)
	b, err := os.ReadFile(ctl)
	if err != nil {
		return false
	}
	s := string(bytes.TrimSpace(b))
	return s == on || s == "FREEZING"
}
