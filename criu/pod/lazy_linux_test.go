package pod

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/testenv/certtest"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

// testTLS writes a CA and, for each name, a certificate it issued for
// 127.0.0.1 (server and client use) into dir, and returns the TLS files
// of each name.
func testTLS(t testing.TB, dir string, names ...string) map[string]*criu.TLS {
	t.Helper()
	ca := certtest.NewCA(t, dir, "ca")
	out := map[string]*criu.TLS{}
	for _, n := range names {
		cert, key := ca.NodeCert(t, dir, n)
		out[n] = &criu.TLS{CACert: ca.File, Cert: cert, Key: key}
	}
	return out
}

// loopbackPort is a TCP port on 127.0.0.1 that nothing listened on a
// moment ago.
func loopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// requireLazy fails the test where the kernel should do lazy pages and
// cannot, and skips it only where it provably lacks userfaultfd.
func requireLazy(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/proc/sys/vm/unprivileged_userfaultfd"); err != nil {
		testutil.Skip(t, "kernel without userfaultfd: %v", err)
	}
}

// TestCheckpointLazyUnfetched checkpoints a two-container pod lazily on
// each freezer this host has: the pod checkpoint is published with a
// manifest that names a distinct page server per container and its
// archives, the containers stay stopped while nobody fetches their
// memory, and once ctx ends the pod is thawed and counts on and the pod
// checkpoint, useless without its memory, is gone.
func TestCheckpointLazyUnfetched(t *testing.T) {
	testutil.RequireRoot(t)
	bin := criutest.Require(t)
	requireLazy(t)
	certs := testTLS(t, t.TempDir(), "source")
	for name, root := range hierarchies(t) {
		t.Run(name, func(t *testing.T) {
			p, dirs := fakePod(t, root)
			dir := filepath.Join(t.TempDir(), "checkpoints")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			path, ckErr := publishLazily(ctx, t, p, dir, bin, certs["source"], nil)
			m, err := ReadManifest(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Containers) != 2 || m.Containers[0].Name != "app" || m.Containers[1].Name != "sidecar" {
				t.Fatalf("containers %+v", m.Containers)
			}
			servers := map[string]bool{}
			for _, c := range m.Containers {
				ps, err := criu.ParsePageServer(c.PageServer)
				if err != nil || ps.Address != "127.0.0.1" || servers[c.PageServer] {
					t.Errorf("container %s: page server %q (%v), want a distinct one on 127.0.0.1", c.Name, c.PageServer, err)
				}
				servers[c.PageServer] = true
				if fi, err := os.Stat(filepath.Join(path, c.Archive)); err != nil || fi.Size() != c.Size {
					t.Errorf("container %s: archive %s: %v (size %d in the manifest)", c.Name, c.Archive, err, c.Size)
				}
			}
			// The containers' work directories are hidden work entries,
			// which listings pass over.
			if ents := visible(t, dir); len(ents) != 1 || ents[0] != filepath.Base(path) {
				t.Errorf("%s holds %v, want the pod checkpoint alone", dir, ents)
			}
			// Nobody fetches: the containers stay stopped.
			before := []int{len(testworkload.Counts(t, dirs[0])), len(testworkload.Counts(t, dirs[1]))}
			time.Sleep(500 * time.Millisecond)
			for i, d := range dirs {
				if n := len(testworkload.Counts(t, d)); n > before[i]+1 {
					t.Errorf("container %s counted from %d to %d while its memory was being served", p.Containers[i].Ref.Container, before[i], n)
				}
			}

			cancel()
			if err := <-ckErr; !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled lazy pod checkpoint: %v, want context.Canceled", err)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the pod checkpoint %s is left after the serve was cancelled: %v", path, err)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("%s holds %d entries after a cancelled lazy pod checkpoint", dir, len(ents))
			}
			assertThawed(t, p, dirs)
		})
	}
}

// visible are the names in dir that do not start with a dot.
func visible(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestCheckpointLazyRefuses: a lazy pod checkpoint without page server
// TLS, or asked for checkpoint images that would hold no memory, is
// refused before anything is frozen.
func TestCheckpointLazyRefuses(t *testing.T) {
	tls := &criu.TLS{CACert: "/ca.crt", Cert: "/node.crt", Key: "/node.key"}
	pod := Pod{Namespace: "default", Name: "web-0", FreezeCgroup: "/cg/pod", Containers: []criu.Target{{Pid: os.Getpid(),
		Ref: criu.ContainerRef{Namespace: "default", Pod: "web-0", Container: "a"}, Container: criu.ContainerOptions{FreezeCgroup: "/cg/pod/a"}}}}
	tests := []struct {
		name string
		o    Options
		want string
	}{
		{"no TLS", Options{Lazy: &Lazy{Address: "127.0.0.1", Port: loopbackPort}}, "Lazy.TLS"},
		{"image", Options{Lazy: &Lazy{Address: "127.0.0.1", Port: loopbackPort, TLS: tls}, ImageRef: func(c string) string { return "registry.example/" + c }}, "ImageRef"},
		{"no address", Options{Lazy: &Lazy{Port: loopbackPort, TLS: tls}}, "Lazy.Address"},
		{"no port", Options{Lazy: &Lazy{Address: "127.0.0.1", TLS: tls}}, "Lazy.Port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.o.Dir = dir
			_, err := Checkpoint(context.Background(), pod, tt.o)
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("%v, want class InvalidArgument", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%v does not name %s", err, tt.want)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("%s holds %d entries", dir, len(ents))
			}
		})
	}
}

// publishLazily starts a lazy Checkpoint of p into dir (its page servers
// on 127.0.0.1 over tls) and returns the pod checkpoint's path once it is
// published, and the channel of Checkpoint's error; res, when set,
// receives Checkpoint's result before the error is sent.
func publishLazily(ctx context.Context, t *testing.T, p Pod, dir string, bin criu.Binary, tls *criu.TLS, res *Result) (string, <-chan error) {
	t.Helper()
	published := make(chan string, 1)
	ckErr := make(chan error, 1)
	go func() {
		r, err := Checkpoint(ctx, p, Options{Dir: dir, Criu: criu.Options{Binary: bin},
			Lazy: &Lazy{Address: "127.0.0.1", Port: loopbackPort, TLS: tls, Published: func(p string) { published <- p }}})
		if res != nil {
			*res = r
		}
		ckErr <- err
	}()
	select {
	case path := <-published:
		return path, ckErr
	case err := <-ckErr:
		t.Fatalf("lazy pod checkpoint ended before it was published: %v", err)
		return "", nil
	}
}

// nsCounter is a counting shell that is the init of its own PID
// namespace, as a container's init is: a restore on this same host gets
// a new namespace and does not collide with the pids of the original,
// which a lazy migration keeps, stopped, until its memory is fetched.
type nsCounter struct {
	pid   int
	count string // the file it writes its count to
}

// nsPod makes a pod cgroup with two container cgroups under root and a
// counter holding 8 MiB in each, in its own PID namespace, that moves
// itself into its container's cgroup before it counts. Everything is
// removed when t ends.
func nsPod(t *testing.T, root string) (Pod, []nsCounter) {
	t.Helper()
	unshare := testutil.RequireBinary(t, "unshare")
	p, cgroups := podCgroups(t, root)
	var out []nsCounter
	for i, name := range podContainers {
		cg := cgroups[i]
		count := filepath.Join(t.TempDir(), "count")
		// Writing 0 to cgroup.procs moves the writer (cgroup-v2.rst,
		// cgroups.txt of v1).
		script := fmt.Sprintf(`echo 0 > %s; x=$(head -c %d /dev/zero | tr '\000' a); i=0
while :; do i=$((i+1)); echo $i > %s; sleep 0.02; done`, filepath.Join(cg, "cgroup.procs"), 8<<20, count)
		cmd := exec.Command(unshare, "--pid", "--fork", "setsid", "sh", "-c", script)
		// A working directory of its own: the /proc the counter sees
		// is the host's, not its namespace's, so CRIU's parasite makes
		// a directory in the task's working directory to mount a proc
		// there (criu/pie/parasite.c, parasite_get_proc_fd), and the
		// two containers' dumps, which run at once, failed with
		// "Can't create a directory (-17)" (EEXIST) in a shared one. A
		// container has a /proc of its own namespace.
		cmd.Dir = filepath.Dir(count)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		var pid int
		testutil.Eventually(t, "the counter of "+name+" counts", func() error {
			c, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "task", strconv.Itoa(cmd.Process.Pid), "children"))
			if len(c) == 0 {
				return errors.New("no child yet")
			}
			if n, err := readCount(count); err != nil || n < 3 {
				return fmt.Errorf("count %d, %v", n, err)
			}
			var err error
			pid, err = strconv.Atoi(strings.Fields(string(c))[0])
			return err
		})
		t.Cleanup(func() { _ = unix.Kill(pid, unix.SIGKILL) })
		tg, err := criu.PIDTarget("/proc", pid, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		tg.Ref = criu.ContainerRef{Namespace: p.Namespace, Pod: p.Name, Container: name}
		tg.Container.FreezeCgroup = cg
		p.Containers = append(p.Containers, tg)
		out = append(out, nsCounter{pid: pid, count: count})
	}
	return p, out
}

func readCount(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// TestCheckpointLazyFetched moves a two-container pod lazily on this
// host, on each freezer it has: once the pod checkpoint is published,
// each container's archive is restored with criu.Restore from the page
// server its manifest names, over mutual TLS with a certificate of the
// same CA. Checkpoint returns once both restores fetched all the memory,
// the originals are gone, both restored counters count on from where
// they were, and the pod checkpoint stays.
func TestCheckpointLazyFetched(t *testing.T) {
	testutil.RequireRoot(t)
	bin := criutest.Require(t)
	requireLazy(t)
	certs := testTLS(t, t.TempDir(), "source", "target")
	for name, root := range hierarchies(t) {
		t.Run(name, func(t *testing.T) {
			p, counters := nsPod(t, root)
			// Read before the checkpoint: a counter stopped between the
			// truncation of its count file and the write leaves it empty
			// until it runs again.
			var before []int
			for _, c := range counters {
				var n int
				testutil.Eventually(t, "a whole count in "+c.count, func() error {
					var err error
					n, err = readCount(c.count)
					return err
				})
				before = append(before, n)
			}
			dir := filepath.Join(t.TempDir(), "checkpoints")
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			var res Result
			path, ckErr := publishLazily(ctx, t, p, dir, bin, certs["source"], &res)
			m, err := ReadManifest(path)
			if err != nil {
				t.Fatal(err)
			}
			type restored struct {
				rst criu.RestoreResult
				err error
			}
			rsts := make([]chan restored, len(m.Containers))
			for i, c := range m.Containers {
				rsts[i] = make(chan restored, 1)
				ps, err := criu.ParsePageServer(c.PageServer)
				if err != nil {
					t.Fatal(err)
				}
				go func() {
					r, err := criu.Restore(ctx, filepath.Join(path, c.Archive), criu.RestoreOptions{Binary: bin, WorkRoot: t.TempDir(), LazyFrom: &ps, LazyTLS: certs["target"]})
					rsts[i] <- restored{r, err}
				}()
			}
			cerr := <-ckErr
			var pids []int
			for i := range rsts {
				r := <-rsts[i]
				if r.err != nil {
					t.Errorf("restore of %s: %v", m.Containers[i].Name, r.err)
					continue
				}
				pids = append(pids, r.rst.Pid)
				t.Cleanup(func() {
					_ = unix.Kill(r.rst.Pid, unix.SIGKILL)
					var ws unix.WaitStatus
					_, _ = unix.Wait4(r.rst.Pid, &ws, 0, nil)
				})
			}
			if cerr != nil {
				t.Fatalf("lazy pod checkpoint: %v", cerr)
			}
			if t.Failed() {
				t.FailNow()
			}
			t.Logf("%s: frozen %s until published, total %s", res.Path, res.Frozen, res.Total)
			if res.Path != path || len(res.Containers) != 2 {
				t.Errorf("result %s with %d containers, want %s with 2", res.Path, len(res.Containers), path)
			}
			if _, err := os.Stat(filepath.Join(path, ManifestFile)); err != nil {
				t.Errorf("the pod checkpoint of a finished lazy migration: %v", err)
			}
			for i, c := range counters {
				testutil.Eventually(t, fmt.Sprintf("the original %s (pid %d) is gone", p.Containers[i].Ref.Container, c.pid), func() error {
					if st, err := criu.ReadProcState("/proc", c.pid); err == nil && !st.Gone() {
						return fmt.Errorf("still there: %s", st)
					}
					return nil
				})
				testutil.Eventually(t, fmt.Sprintf("the restored %s (pid %d) counts past %d", p.Containers[i].Ref.Container, pids[i], before[i]), func() error {
					if n, err := readCount(c.count); err != nil || n <= before[i]+2 {
						return fmt.Errorf("count %d, %v", n, err)
					}
					return nil
				})
			}
		})
	}
}

// TestThawGoneCgroup: a cgroup that is gone (a lazy checkpoint's
// container ended, its pod deleted) has nothing to thaw; one that is
// there but cannot be thawed is an error.
func TestThawGoneCgroup(t *testing.T) {
	dir := t.TempDir()
	if err := thaw(filepath.Join(dir, "gone")); err != nil {
		t.Errorf("thaw of a cgroup that is gone: %v", err)
	}
	if err := thaw(dir); err == nil {
		t.Error("thaw of a directory with no freezer file succeeded")
	}
}
