//go:build nodevm

package nodetest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/testenv/nodevm"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// podmanGraphRoot is podman's default storage root for root, where
// podman 5 keeps its SQLite state (db.sql).
const podmanGraphRoot = "/var/lib/containers/storage"

// nodePodman is trixie's podman 5.4 on the node, as root with its default
// storage, the systemd cgroup manager and one OCI runtime (runc 1.5 from
// NodeBin or trixie's crun 1.21) through a containers.conf of the test's
// that nodeshim reads too ($CONTAINERS_CONF).
type nodePodman struct {
	env []string
}

// newNodePodman writes the containers.conf with runtime (runc or crun)
// as podman's runtime, at path, loads the node's busybox test image and
// removes every podman container when t ends.
func newNodePodman(t *testing.T, runtime, path string) *nodePodman {
	t.Helper()
	// The checkpoint image names its runtime and podman refuses to
	// restore an image of another one than its own: the same runtime on
	// both sides. No network (netavark needs nftables, which the node
	// lacks), the events in a file rather than the journal.
	conf := fmt.Sprintf(`[containers]
netns = "none"
log_driver = "k8s-file"

[engine]
cgroup_manager = "systemd"
events_logger = "file"
runtime = %[1]q

[engine.runtimes]
%[1]s = [%[2]q]
`, runtime, path)
	confPath := filepath.Join(t.TempDir(), "containers.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &nodePodman{env: append(os.Environ(), "CONTAINERS_CONF="+confPath)}
	t.Cleanup(func() {
		if out, err := p.cmd("rm", "--all", "--force", "--time", "0").CombinedOutput(); err != nil {
			t.Errorf("podman rm --all: %v: %s", err, out)
		}
	})
	if v := p.run(t, "version", "--format", "{{.Client.Version}}"); !strings.HasPrefix(v, "5.") {
		t.Fatalf("podman version %q, want podman 5", v)
	}
	out := p.run(t, "load", "-i", filepath.Join(nodevm.NodeLib, "images", "busybox.oci.tar"))
	if p.cmd("image", "exists", runtimetest.BusyboxImage).Run() != nil {
		// An OCI archive's image may be named by its id only.
		p.run(t, "tag", strings.TrimSpace(out[strings.LastIndex(out, ":")+1:]), runtimetest.BusyboxImage)
	}
	return p
}

func (p *nodePodman) cmd(args ...string) *exec.Cmd {
	cmd := exec.Command("podman", args...)
	cmd.Env = p.env
	return cmd
}

// run runs podman with args and returns its trimmed standard output; it
// fails t with podman's standard error.
func (p *nodePodman) run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := p.runErr(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (p *nodePodman) runErr(args ...string) (string, error) {
	cmd := p.cmd(args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("podman %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// nodeshim runs the nodeshim CLI in podman's environment (its
// containers.conf names the state backend nodeshim reads).
func (p *nodePodman) nodeshim(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(nodeshimBin, args...)
	cmd.Env = p.env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nodeshim %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out)
}

// pid is the pid of the running container name's init, as podman has it.
func (p *nodePodman) pid(name string) (int, error) {
	out, err := p.runErr("inspect", "--format", "{{.State.Pid}}", name)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(out)
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("podman inspect %s: pid %q", name, out)
	}
	return pid, nil
}

// waitCount waits until the counter (counterCommand) of container name is
// above n, reading its /count through its init's root, and returns its
// token and count.
func (p *nodePodman) waitCount(t *testing.T, name string, n int) (string, int) {
	t.Helper()
	var token string
	var got int
	testutil.Eventually(t, fmt.Sprintf("counter of podman container %s above %d", name, n), func() error {
		pid, err := p.pid(name)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/root/count", pid))
		if err != nil {
			return err
		}
		f := strings.Fields(string(b))
		if len(f) != 2 {
			return fmt.Errorf("/count %q", b)
		}
		v, err := strconv.Atoi(f[1])
		if err != nil {
			return fmt.Errorf("/count %q", b)
		}
		if v <= n {
			return fmt.Errorf("count %d", v)
		}
		token, got = f[0], v
		return nil
	})
	return token, got
}

// TestPodman5CheckpointRestoreOnNode is nodeshim with trixie's podman 5.4
// on the node (SQLite state, the systemd cgroup manager on pure cgroup v2),
// with runc 1.5 and with crun 1.21 (trixie's podman default, CRIU through
// libcriu2) as podman's runtime: a counter container run by podman is
// checkpointed by its id (`nodeshim checkpoint --container-id`), the
// archive is read by checkpointctl and restored by `podman container
// restore --import`, the counter going on from where it was; the restored
// container is checkpointed again with its checkpoint image (`--image
// --image-file`), which podman 5 loads and restores (`podman container
// restore IMAGE`), the counter going on again.
func TestPodman5CheckpointRestoreOnNode(t *testing.T) {
	requireNode(t)
	for _, rt := range []struct{ name, path string }{
		{"runc", filepath.Join(nodevm.NodeBin, "runc")},
		{"crun", "/usr/bin/crun"},
	} {
		t.Run(rt.name, func(t *testing.T) { podmanCheckpointRestore(t, rt.name, rt.path) })
	}
}

// podmanCheckpointRestore is TestPodman5CheckpointRestoreOnNode with
// runtime at path as podman's runtime.
func podmanCheckpointRestore(t *testing.T, runtime, path string) {
	p := newNodePodman(t, runtime, path)
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	info := p.run(t, "info", "--format", "{{.Host.DatabaseBackend}} {{.Host.CgroupManager}} {{.Host.CgroupsVersion}} {{.Host.OCIRuntime.Name}} {{.Store.GraphRoot}}")
	if want := "sqlite systemd v2 " + runtime + " " + podmanGraphRoot; info != want {
		t.Fatalf("podman info: %q, want %q", info, want)
	}
	if _, err := os.Stat(filepath.Join(podmanGraphRoot, "db.sql")); err != nil {
		t.Fatalf("podman 5's SQLite state: %v", err)
	}

	name := "ns-node-p5-" + runtime
	start := time.Now()
	id := p.run(t, append([]string{"run", "--detach", "--name", name, "--network", "none", runtimetest.BusyboxImage}, counterCommand...)...)
	tRun := time.Since(start)
	token, before := p.waitCount(t, name, 5)
	// The systemd cgroup manager's scope under machine.slice.
	pid, err := p.pid(name)
	if err != nil {
		t.Fatal(err)
	}
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	if want := "0::/machine.slice/libpod-" + id + ".scope"; !strings.HasPrefix(strings.TrimSpace(string(cg)), want) {
		t.Errorf("podman container %s is in cgroup %q, want %s", id, cg, want)
	}

	// 1. By id, from the SQLite state, into <root-dir>/checkpoints.
	rootDir := t.TempDir()
	start = time.Now()
	out := p.nodeshim(t, "checkpoint", "--container-id", id, "--podman-root", podmanGraphRoot, "--root-dir", rootDir, "-o", "json")
	tCheckpoint := time.Since(start)
	var ck checkpointResult
	if err := json.Unmarshal([]byte(out), &ck); err != nil {
		t.Fatalf("nodeshim checkpoint -o json: %v: %s", err, out)
	}
	if ck.Path == "" || filepath.Dir(ck.Path) != filepath.Join(rootDir, "checkpoints") || ck.FrozenSeconds <= 0 || ck.PagesWritten == 0 {
		t.Errorf("nodeshim checkpoint --container-id %s: %+v; want an archive under %s/checkpoints with its frozen time and pages", id, ck, rootDir)
	}
	// The container runs on after its checkpoint.
	_, after := p.waitCount(t, name, before)

	// 2. checkpointctl reads it as podman's own archive.
	show := run(t, checkpointctlBin, "show", ck.Path)
	if !strings.Contains(show, name) || !strings.Contains(strings.ToLower(show), "podman") || !strings.Contains(show, runtimetest.BusyboxImage) {
		t.Errorf("checkpointctl show %s does not name the container %s, podman and its image:\n%s", ck.Path, name, show)
	}
	if tree := run(t, checkpointctlBin, "inspect", "--ps-tree", ck.Path); !strings.Contains(tree, "sh") {
		t.Errorf("checkpointctl inspect --ps-tree %s shows no counting shell:\n%s", ck.Path, tree)
	}

	// 3. podman 5 restores the archive in place of the container.
	p.run(t, "rm", "--force", "--time", "0", name)
	start = time.Now()
	restoredID, err := p.runErr("container", "restore", "--import", ck.Path)
	if err != nil {
		if m := regexp.MustCompile(`/\S+/restore\.log`).FindString(err.Error()); m != "" {
			b, _ := os.ReadFile(m)
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			t.Logf("%s (last lines):\n%s", m, strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
		// podman's own checkpoint of the same image and command, restored
		// the same way, tells nodeshim's archive from the runtime apart.
		p.run(t, append([]string{"run", "--detach", "--name", "own", "--network", "none", runtimetest.BusyboxImage}, counterCommand...)...)
		p.waitCount(t, "own", 3)
		own := filepath.Join(t.TempDir(), "own.tar")
		if out, err := p.runErr("container", "checkpoint", "--export", own, "own"); err != nil {
			t.Logf("podman's own checkpoint fails too: %v %s", err, out)
		} else if out, err := p.runErr("container", "restore", "--import", own, "--name", "own2"); err != nil {
			t.Logf("podman's own archive does not restore either: %v %s", err, out)
		} else {
			t.Logf("podman's own checkpoint --export and restore --import of the same container work (%s): nodeshim's archive is at fault", out)
		}
		t.Fatal(err)
	}
	tRestore := time.Since(start)
	if restoredID != id {
		t.Errorf("podman container restore --import: %q, want the container's id %s", restoredID, id)
	}
	restoredToken, first := p.waitCount(t, name, 0)
	if restoredToken != token || first < before {
		t.Fatalf("restored counter %s at %d; before the checkpoint %s at %d: it started afresh", restoredToken, first, token, before)
	}
	_, next := p.waitCount(t, name, first)

	// 4. The restored container, checkpointed again with its checkpoint
	// image, comes back from the image.
	ref := "localhost/nodeshim/podman-checkpoint:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	file := filepath.Join(t.TempDir(), "podman.oci.tar")
	start = time.Now()
	out = p.nodeshim(t, "checkpoint", "--container-id", name, "--podman-root", podmanGraphRoot, "--root-dir", rootDir,
		"--image", ref, "--image-file", file, "-o", "json")
	tImage := time.Since(start)
	var ck2 checkpointResult
	if err := json.Unmarshal([]byte(out), &ck2); err != nil || ck2.Path == "" || ck2.Path == ck.Path {
		t.Fatalf("nodeshim checkpoint --container-id %s --image: %v: %s", name, err, out)
	}
	_, before2 := p.waitCount(t, name, next)
	p.run(t, "rm", "--force", "--time", "0", name)
	start = time.Now()
	p.run(t, "load", "-i", file)
	tLoad := time.Since(start)
	t.Cleanup(func() { _, _ = p.runErr("rmi", "--force", ref) })
	start = time.Now()
	p.run(t, "container", "restore", ref)
	tImageRestore := time.Since(start)
	imageToken, fromImage := p.waitCount(t, name, 0)
	if imageToken != token || fromImage < next {
		t.Fatalf("counter restored from %s %s at %d; before its checkpoint %s at %d: it started afresh", ref, imageToken, fromImage, token, next)
	}
	_, last := p.waitCount(t, name, fromImage)

	t.Logf("podman 5 (%s) counter: %d at the checkpoint, %d after it, %d then %d restored from the archive; %d then %d restored from the image (%d read after its checkpoint)",
		runtime, before, after, first, next, fromImage, last, before2)
	t.Logf("podman run %s; nodeshim checkpoint --container-id %s (frozen %.3fs, CRIU total %.3fs, %d pages); podman container restore --import %s; checkpoint with --image %s; podman load %s; podman container restore IMAGE %s",
		ms(tRun), ms(tCheckpoint), ck.FrozenSeconds, ck.TotalSeconds, ck.PagesWritten, ms(tRestore), ms(tImage), ms(tLoad), ms(tImageRestore))
}
