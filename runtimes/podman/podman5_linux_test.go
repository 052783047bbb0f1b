package podman_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/runtimes/podman"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// EnvPodman5 names podman 5 (mk/podman5.mk: Debian trixie's podman 5.4.2
// in a private prefix, with its conmon and netavark beside it).
const EnvPodman5 = "NODESHIM_PODMAN5"

// podman5 runs podman 5 on a private storage root with the machine's runc.
type podman5 struct {
	bin, dir, root, run string
	env                 []string
	cgroupParent        string
}

// newPodman5 sets up podman 5's private storage; with podman4 set (the
// path of podman 4) that podman creates the storage first, as on a node
// upgraded from podman 4.
func newPodman5(t *testing.T, podman4 string) *podman5 {
	t.Helper()
	testutil.RequireRoot(t)
	// The kernel-matrix guests carry no container runtime (vmtest's
	// GuestLacks names podman); the host's run covers podman 5.
	testutil.SkipIfGuestLacks(t, "podman")
	bin := testutil.RequireTool(t, EnvPodman5, "podman5")
	runc := testutil.RequireBinary(t, "runc")
	busybox := testutil.RequireBinary(t, "busybox")
	prefix := filepath.Dir(filepath.Dir(filepath.Dir(bin))) // PREFIX/usr/bin/podman
	dir, err := os.MkdirTemp("", "nodeshim-podman5-")
	if err != nil {
		t.Fatal(err)
	}
	p := &podman5{
		bin: bin, dir: dir, root: filepath.Join(dir, "root"), run: filepath.Join(dir, "run"),
		cgroupParent: "/" + filepath.Base(dir),
	}
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{p.root, p.run, filepath.Join(dir, "tmp"), filepath.Join(rootfs, "bin")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// A busybox rootfs (--rootfs) spares the test an image: the state
	// database is what is under test.
	if out, err := exec.Command("cp", busybox, filepath.Join(rootfs, "bin", "busybox")).CombinedOutput(); err != nil {
		t.Fatalf("cp busybox: %v: %s", err, out)
	}
	for _, a := range []string{"sh", "sleep", "cat"} {
		if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", a)); err != nil {
			t.Fatal(err)
		}
	}
	// Limits within this machine's hard limits (runc cannot raise them,
	// see testenv/runtimetest).
	conf := fmt.Sprintf(`[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
log_driver = "k8s-file"
netns = "none"

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = %[1]q
tmp_dir = %[2]q
conmon_path = [%[3]q]
helper_binaries_dir = [%[4]q]
runtime = "runc"

[engine.runtimes]
runc = [%[5]q]
`, filepath.Join(dir, "events.log"), filepath.Join(dir, "tmp"), filepath.Join(prefix, "usr/bin/conmon"),
		filepath.Join(prefix, "usr/lib/podman"), runc)
	storage := fmt.Sprintf("[storage]\ndriver = \"overlay\"\ngraphroot = %q\nrunroot = %q\n", p.root, p.run)
	for name, data := range map[string]string{"containers.conf": conf, "storage.conf": storage} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p.env = append(os.Environ(), "CONTAINERS_CONF="+filepath.Join(dir, "containers.conf"),
		"CONTAINERS_STORAGE_CONF="+filepath.Join(dir, "storage.conf"), "PODMAN_IGNORE_CGROUPSV1_WARNING=1")
	t.Cleanup(func() { p.close(t) })
	if podman4 != "" {
		cmd := p.cmd("info")
		cmd.Path, cmd.Args[0] = podman4, podman4
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s info: %v: %s", podman4, err, out)
		}
	}
	out, err := p.cmd("version", "--format", "{{.Client.Version}}").Output()
	if err != nil || !strings.HasPrefix(string(out), "5.") {
		t.Fatalf("%s version: %q, %v", bin, out, err)
	}
	return p
}

func (p *podman5) cmd(args ...string) *exec.Cmd {
	global := []string{"--root", p.root, "--runroot", p.run, "--cgroup-manager", "cgroupfs"}
	cmd := exec.Command(p.bin, append(global, args...)...)
	cmd.Env = p.env
	return cmd
}

func (p *podman5) mustRun(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := p.cmd(args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("podman %s: %v: %s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return strings.TrimSpace(stdout.String())
}

// close removes every container, waits for conmon and podman's cleanup
// processes of this root to end, and removes the storage and the cgroup
// parent.
func (p *podman5) close(t *testing.T) {
	if out, err := p.cmd("rm", "--all", "--force", "--time", "0").CombinedOutput(); err != nil {
		t.Errorf("podman rm --all: %v: %s", err, out)
	}
	testutil.Eventually(t, "conmon and podman of "+p.root+" exit", func() error {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			if _, err := strconv.Atoi(e.Name()); err != nil {
				continue
			}
			cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if bytes.Contains(cmdline, []byte(p.root)) {
				return fmt.Errorf("pid %s: %q", e.Name(), bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
			}
		}
		return nil
	})
	_ = exec.Command("umount", "-R", p.run).Run() // nothing should be left mounted; an error says so below
	if err := os.RemoveAll(p.dir); err != nil {
		t.Errorf("remove podman storage: %v", err)
	}
	// The parent holds conmon's cgroup (<parent>/conmon) in every v1
	// hierarchy: remove the tree bottom-up.
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + p.cgroupParent)
	for _, d := range dirs {
		var tree []string
		_ = filepath.WalkDir(d, func(path string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				tree = append(tree, path)
			}
			return nil
		})
		for i := len(tree) - 1; i >= 0; i-- {
			if err := os.Remove(tree[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("remove cgroup: %v", err)
			}
		}
	}
}

// TestPodman5State runs containers with podman 5 and resolves them from
// the state database podman wrote, as `nodeshim checkpoint --container-id`
// does: SQLite, podman 5's default, and the BoltDB that podman 4 created
// and podman 5 keeps using (podman 5.4 refuses to create a new one: "the
// BoltDB backend has been deprecated").
func TestPodman5State(t *testing.T) {
	for _, tc := range []struct {
		name    string
		podman4 bool // podman 4 creates the storage
		want    podman.Backend
		other   string // the other backend's database, which must not exist
	}{
		{name: "sqlite", want: podman.BackendSQLite, other: "libpod/bolt_state.db"},
		{name: "boltdb from podman 4", podman4: true, want: podman.BackendBoltDB, other: "db.sql"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			podman4 := ""
			if tc.podman4 {
				podman4 = testutil.RequireTool(t, runtimetest.EnvPodman, "podman")
			}
			p := newPodman5(t, podman4)
			name := "ns-p5-" + strings.ReplaceAll(tc.name, " ", "-")
			id := p.mustRun(t, "run", "--detach", "--name", name, "--network", "none", "--cgroup-parent", p.cgroupParent,
				"--rootfs", filepath.Join(p.dir, "rootfs"), "sh", "-c", "while true; do sleep 1; done")
			if got := p.mustRun(t, "info", "--format", "{{.Host.DatabaseBackend}}"); got != string(tc.want) {
				t.Fatalf("podman info: backend %q, want %q", got, tc.want)
			}
			st, err := podman.FindState(p.root, podman.BackendDefault)
			if err != nil {
				t.Fatal(err)
			}
			if st.Backend != tc.want {
				t.Fatalf("FindState = %v, want backend %s", st, tc.want)
			}
			if _, err := os.Stat(filepath.Join(p.root, tc.other)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("podman %s also wrote %s (%v)", tc.want, tc.other, err)
			}
			// What podman itself says about the container.
			var insp []struct {
				ID, Name, OCIRuntime, OCIConfigPath string
				State                               struct{ Pid int }
				Created                             time.Time
			}
			if err := json.Unmarshal([]byte(p.mustRun(t, "inspect", id)), &insp); err != nil || len(insp) != 1 {
				t.Fatalf("podman inspect: %v", err)
			}
			want := insp[0]
			for _, ref := range []string{id, name, id[:12]} {
				c, err := st.Lookup(ref, time.Second)
				if err != nil {
					t.Fatalf("Lookup(%s): %v", ref, err)
				}
				if c.ID != want.ID || c.Name != want.Name || c.Pid != want.State.Pid || c.Pid <= 0 || c.State != "running" ||
					c.Runtime != want.OCIRuntime || c.SpecPath != want.OCIConfigPath || !c.Created.Equal(want.Created) {
					t.Errorf("Lookup(%s) = id %s name %s pid %d state %s runtime %s spec %s created %v; podman inspect: %+v",
						ref, c.ID, c.Name, c.Pid, c.State, c.Runtime, c.SpecPath, c.Created, want)
				}
				if err := c.Running(); err != nil {
					t.Error(err)
				}
				// The bundle's spec, with the mounts podman adds at start.
				if c.Spec == nil || c.Spec.Process == nil || !hasMount(c.Spec, "/dev/shm") {
					t.Errorf("Lookup(%s): spec without the bundle's /dev/shm mount: %+v", ref, c.Spec)
				}
				var cfg map[string]json.RawMessage
				if err := json.Unmarshal(c.Config, &cfg); err != nil || string(cfg["id"]) != strconv.Quote(id) || cfg["spec"] == nil {
					t.Errorf("Lookup(%s): config.dump is not podman's config of %s: %v", ref, id, err)
				}
			}
			// The pid is the container's init, the shell loop.
			if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", want.State.Pid)); err != nil || !bytes.Contains(cmdline, []byte("while true")) {
				t.Errorf("pid %d runs %q (%v), want the container's shell loop", want.State.Pid, cmdline, err)
			}
			if _, err := st.Lookup("ns-p5-nope", time.Second); !errors.Is(err, podman.ErrNotFound) {
				t.Errorf("unknown name: %v, want ErrNotFound", err)
			}
			// A LIKE wildcard is no prefix of every id.
			if _, err := st.Lookup("%", time.Second); !errors.Is(err, podman.ErrNotFound) {
				t.Errorf(`Lookup("%%"): %v, want ErrNotFound`, err)
			}
			// The other backend's database does not exist: said so, by name.
			other := podman.BackendBoltDB
			if tc.want == podman.BackendBoltDB {
				other = podman.BackendSQLite
			}
			if _, err := podman.FindState(p.root, other); !errors.Is(err, podman.ErrNoState) || !errors.Is(err, errdefs.ErrNotFound) ||
				!strings.Contains(err.Error(), string(other)) {
				t.Errorf("FindState(%s) = %v, want ErrNoState naming the backend", other, err)
			}

			// The checkpoint's target: podman's config as config.dump, the
			// bundle's spec, the container's init.
			target, err := podman.StateTarget("/proc", st, name, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if target.ID != id || target.Runtime != want.OCIRuntime || target.Ref.Container != name || !json.Valid(target.ConfigDump) {
				t.Errorf("StateTarget = id %s runtime %s ref %+v config.dump %d bytes", target.ID, target.Runtime, target.Ref, len(target.ConfigDump))
			}
			if tc.want == podman.BackendSQLite {
				lockedSQLite(t, st)
			}

			p.mustRun(t, "stop", "--time", "0", id)
			testutil.Eventually(t, "the stopped container's state", func() error {
				c, err := st.Lookup(name, time.Second)
				if err != nil {
					return err
				}
				if err := c.Running(); !errors.Is(err, podman.ErrNotRunning) {
					return fmt.Errorf("stopped container: state %s pid %d: Running() = %v", c.State, c.Pid, err)
				}
				return nil
			})
		})
	}
}

func hasMount(s *specs.Spec, dest string) bool {
	for _, m := range s.Mounts {
		if m.Destination == dest {
			return true
		}
	}
	return false
}

// lockedSQLite holds podman's db.sql as a podman writer does (podman's
// transactions are _txlock=exclusive) and checks that a lookup waits for
// its busy timeout and then says the state is locked, and that it reads
// once the writer is done.
func lockedSQLite(t *testing.T, st podman.State) {
	t.Helper()
	db, err := sql.Open("sqlite", st.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var mode string
	if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: journal mode %s", st, mode)
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		t.Fatal(err)
	}
	_, err = st.Lookup("ns-p5-sqlite", 50*time.Millisecond)
	if mode == "wal" {
		// A WAL database lets readers read past a writer.
		if err != nil {
			t.Errorf("WAL database held by a writer: %v", err)
		}
	} else if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), st.Path) {
		t.Errorf("%s database (journal %s) held by a writer: %v, want unavailable naming it", st.Backend, mode, err)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Lookup("ns-p5-sqlite", time.Second); err != nil {
		t.Errorf("after the writer: %v", err)
	}
}

// count reads /count of container name, again while a container just
// restored does not answer exec yet or the shell has truncated the file.
func (p *podman5) count(t *testing.T, name string, above int) int {
	t.Helper()
	var n int
	testutil.Eventually(t, fmt.Sprintf("container %s counts past %d", name, above), func() error {
		out, err := p.cmd("exec", name, "cat", "/count").CombinedOutput()
		if err != nil {
			return fmt.Errorf("podman exec %s cat /count: %v: %s", name, err, out)
		}
		if n, err = strconv.Atoi(strings.TrimSpace(string(out))); err != nil {
			return fmt.Errorf("/count of %s: %q", name, out)
		}
		if n <= above {
			return fmt.Errorf("count %d", n)
		}
		return nil
	})
	return n
}

// TestPodman5CheckpointRestore is `nodeshim checkpoint --container-id` and
// `nodeshim restore` on podman 5: nodeshim resolves a podman 5 runc
// container from its SQLite state, checkpoints it, and podman 5 restores
// the archive (`podman container restore --import`, through
// podman.Restore); the restored container is in the SQLite state at the
// pid Restore reports and counts on.
func TestPodman5CheckpointRestore(t *testing.T) {
	p := newPodman5(t, "")
	bin := criutest.RequireOnPath(t)
	img := rt.Images(t)
	out := p.mustRun(t, "load", "-i", img.Busybox)
	if p.cmd("image", "exists", runtimetest.BusyboxImage).Run() != nil {
		// An OCI archive's image may be named by its id only.
		loaded := strings.TrimSpace(out[strings.LastIndex(out, ":")+1:])
		p.mustRun(t, "tag", loaded, runtimetest.BusyboxImage)
	}
	const name = "ns-p5-counter"
	p.mustRun(t, "run", "--detach", "--name", name, "--network", "none", "--cgroup-parent", p.cgroupParent,
		runtimetest.BusyboxImage, "sh", "-c", counter[2])
	before := p.count(t, name, 20)
	st, err := podman.FindState(p.root, podman.BackendDefault)
	if err != nil || st.Backend != podman.BackendSQLite {
		t.Fatalf("FindState = %v, %v; want podman 5's sqlite", st, err)
	}
	// Target, as `nodeshim checkpoint --container-id --podman-root` runs
	// it: the backend from containers.conf ($CONTAINERS_CONF, podman's
	// own, which leaves database_backend unset), then the database.
	t.Setenv("CONTAINERS_CONF", filepath.Join(p.dir, "containers.conf"))
	target, err := podman.Target("/proc", p.root, name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	res, err := criu.Checkpoint(context.Background(), target, criu.Options{Binary: bin, ArchiveDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	p.mustRun(t, "rm", "--force", "--time", "0", name)
	global := p.cmd().Args[1:]
	r, err := podman.Restore(context.Background(), res.Path, podman.RestoreOptions{Podman: p.bin, GlobalFlags: global, Env: p.env, Criu: bin})
	if err != nil {
		t.Fatal(err)
	}
	if r.Name != name || r.ID != target.ID {
		t.Errorf("restored %q (%s), want %q (%s)", r.Name, r.ID, name, target.ID)
	}
	c, err := st.Lookup(name, podman.LockWait)
	if err != nil {
		t.Fatal(err)
	}
	if c.State != "running" || c.Pid != r.Pid {
		t.Errorf("podman 5 has %s %s at pid %d, Restore said pid %d", c.Name, c.State, c.Pid, r.Pid)
	}
	// A fresh start would count from 1.
	restored := p.count(t, name, 0)
	if restored < before {
		t.Fatalf("restored container counts %d, below %d seen before the checkpoint: it was not restored", restored, before)
	}
	p.count(t, name, restored)
	t.Logf("podman 5: count %d at the checkpoint, %d restored; restore took %s", before, restored, r.Took)
}
