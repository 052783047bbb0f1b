package criu

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/testenv/certtest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

func TestParsePageServer(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want PageServer
		ok   bool
	}{
		{"127.0.0.1:27000", PageServer{"127.0.0.1", 27000}, true},
		{"[::1]:1", PageServer{"::1", 1}, true},
		{"node-a:65535", PageServer{"node-a", 65535}, true},
		{"127.0.0.1", PageServer{}, false},
		{":27000", PageServer{}, false},
		{"a:0", PageServer{}, false},
		{"a:65536", PageServer{}, false},
		{"a:http", PageServer{}, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParsePageServer(tc.in)
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("ParsePageServer(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
			}
			if tc.ok && got.String() != tc.in {
				t.Errorf("String() = %q, want %q", got.String(), tc.in)
			}
		})
	}
}

// lazyScript holds %d bytes in a shell variable (anonymous memory) and
// counts in %s every 20 ms.
const lazyScript = `x=$(head -c %d /dev/zero | tr '\000' a); i=0
while :; do i=$((i+1)); echo $i > %s; sleep 0.02; done`

// startInPidNS starts a counting shell holding mib MiB as the init of its
// own PID namespace (and session), so that a restore on this same host
// gets a new namespace and does not collide with the pids of the
// original, which a lazy migration keeps (frozen) until the restore has
// its memory. It returns the shell's host pid and its count file.
func startInPidNS(t testing.TB, mib int) (int, string) {
	t.Helper()
	unshare := testutil.RequireBinary(t, "unshare")
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	cmd := exec.Command(unshare, "--pid", "--fork", "setsid", "sh", "-c", fmt.Sprintf(lazyScript, mib<<20, count))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	for {
		if c, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "task", strconv.Itoa(cmd.Process.Pid), "children")); len(c) > 0 {
			if n, err := readCount(count); err == nil && n > 2 {
				pid, err := strconv.Atoi(strings.Fields(string(c))[0])
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
				return pid, count
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readCount(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// waitCount is the count in path once it reads whole: the shell's
// redirection truncates the file before it writes the next number, so a
// read can fall between the two and see nothing.
func waitCount(t testing.TB, path string) int {
	t.Helper()
	var n int
	testutil.Eventually(t, "a whole count in "+path, func() error {
		var err error
		n, err = readCount(path)
		return err
	})
	return n
}

// freePort is a TCP port on 127.0.0.1 that nothing listened on a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// lazyMove is one lazy migration on this host: Checkpoint with Lazy, and,
// once its archive is published, Restore with LazyFrom.
type lazyMove struct {
	ck       Result
	rst      RestoreResult
	archived time.Time // the archive was published
}

// publishLazily starts a lazy Checkpoint of tg (its page server on
// 127.0.0.1, over tls when set) and returns its archive once published,
// the page server, and the channel of Checkpoint's error.
func publishLazily(ctx context.Context, t testing.TB, bin Binary, tg Target, tls *TLS, o *Result) (string, PageServer, <-chan error) {
	t.Helper()
	ps := PageServer{Address: "127.0.0.1", Port: freePort(t)}
	published := make(chan string, 1)
	ckErr := make(chan error, 1)
	go func() {
		res, err := Checkpoint(ctx, tg, Options{Binary: bin, RootDir: t.TempDir(), Lazy: &ps, PageServerTLS: tls,
			Published: func(p string) { published <- p }})
		if o != nil {
			*o = res
		}
		ckErr <- err
	}()
	select {
	case archive := <-published:
		return archive, ps, ckErr
	case err := <-ckErr:
		t.Fatalf("lazy checkpoint ended before publishing its archive: %v", err)
		return "", ps, nil
	}
}

func moveLazily(t testing.TB, bin Binary, pid int) lazyMove {
	t.Helper()
	tg, err := PIDTarget("/proc", pid, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var m lazyMove
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	archive, ps, ckErr := publishLazily(ctx, t, bin, tg, nil, &m.ck)
	m.archived = time.Now()
	var rerr error
	m.rst, rerr = Restore(ctx, archive, RestoreOptions{Binary: bin, WorkRoot: t.TempDir(), LazyFrom: &ps})
	if err := <-ckErr; err != nil || rerr != nil {
		t.Fatalf("lazy move: checkpoint: %v; restore: %v", err, rerr)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(m.rst.Pid, syscall.SIGKILL)
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(m.rst.Pid, &ws, 0, nil)
	})
	return m
}

// TestLazyMigration moves a counting process tree in its own PID
// namespace by a lazy checkpoint and a lazy restore on this host: the
// original is gone, the restored tree counts on from where it was.
func TestLazyMigration(t *testing.T) {
	bin := requireCriu(t)
	if _, err := os.Stat("/proc/sys/vm/unprivileged_userfaultfd"); err != nil {
		testutil.Skip(t, "kernel without userfaultfd: %v", err)
	}
	pid, count := startInPidNS(t, 16)
	m := moveLazily(t, bin, pid)
	before := waitCount(t, count)
	if st, err := ReadProcState("/proc", pid); err == nil && !st.Gone() {
		t.Errorf("the original pid %d is still there (%s) after its memory was fetched", pid, st)
	}
	testutil.Eventually(t, fmt.Sprintf("the restored tree (pid %d) counts past %d", m.rst.Pid, before), func() error {
		if n, err := readCount(count); err != nil || n <= before {
			return fmt.Errorf("count %d, %v", n, err)
		}
		return nil
	})
	t.Logf("checkpoint: frozen %s, archive %d bytes in %s, serve %s; restore: running after %s, memory fetched %s later",
		m.ck.Frozen, m.ck.Size, m.ck.Archive, m.ck.Serve, m.rst.Unpack+m.rst.Restore, m.rst.Fetch)
}

// BenchmarkLazyMigration moves a process tree holding a working set of
// anonymous memory that it barely touches (a shell loop; 1 GiB by
// default, NODESHIM_LAZY_MIB) from one PID namespace on this host to a
// new one, side by side:
//
//   - plain: Checkpoint (the memory written to the archive while the tree
//     is frozen), the original killed, Restore of the archive;
//   - lazy: Checkpoint with Lazy and Restore with LazyFrom: the archive
//     without the memory, the tree running on the restoring side before
//     its memory has arrived.
//
// frozen-ms is the freeze before the tree can run elsewhere (plain:
// CRIU's frozen_time; lazy: dump start to page server ready); to-running-ms
// is from the checkpoint's start to the restored tree running (plain:
// checkpoint and restore; lazy: archive published and restore until CRIU
// returns, the memory still on its way); fetch-ms is the lazy restore's
// background copy after that.
func BenchmarkLazyMigration(b *testing.B) {
	bin := requireCriu(b)
	mib := 1024
	if s := os.Getenv("NODESHIM_LAZY_MIB"); s != "" {
		var err error
		if mib, err = strconv.Atoi(s); err != nil || mib <= 0 {
			b.Fatalf("NODESHIM_LAZY_MIB=%q is not a size in MiB", s)
		}
	}
	for _, mode := range []string{"plain", "lazy"} {
		b.Run(fmt.Sprintf("%dMiB/%s", mib, mode), func(b *testing.B) {
			var frozen, running, fetch time.Duration
			var size int64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				pid, count := startInPidNS(b, mib)
				b.StartTimer()
				start := time.Now()
				switch mode {
				case "plain":
					tg, err := PIDTarget("/proc", pid, time.Now())
					if err != nil {
						b.Fatal(err)
					}
					ck, err := Checkpoint(context.Background(), tg, Options{Binary: bin, RootDir: b.TempDir()})
					if err != nil {
						b.Fatal(err)
					}
					// The move: the original goes, the archive is restored
					// once its pids are free (its parent has reaped it).
					testworkload.Kill(b, pid)
					rst, err := Restore(context.Background(), ck.Path, RestoreOptions{Binary: bin, WorkRoot: b.TempDir()})
					if err != nil {
						b.Fatal(err)
					}
					running += time.Since(start)
					frozen += ck.Frozen
					size += ck.Size
					b.Cleanup(func() { _ = syscall.Kill(rst.Pid, syscall.SIGKILL) })
				case "lazy":
					m := moveLazily(b, bin, pid)
					running += m.archived.Sub(start) + m.rst.Unpack + m.rst.Restore
					frozen += m.ck.Frozen
					fetch += m.rst.Fetch
					size += m.ck.Size
				}
				b.StopTimer()
				before := waitCount(b, count)
				for n := before; n <= before; n, _ = readCount(count) {
					time.Sleep(20 * time.Millisecond)
				}
				b.StartTimer()
			}
			n := float64(b.N)
			b.ReportMetric(float64(frozen.Milliseconds())/n, "frozen-ms")
			b.ReportMetric(float64(running.Milliseconds())/n, "to-running-ms")
			b.ReportMetric(float64(fetch.Milliseconds())/n, "fetch-ms")
			b.ReportMetric(float64(size)/(1<<20)/n, "archive-MiB")
		})
	}
}

// testTLS writes a CA and, for each name, a certificate it issued for
// 127.0.0.1 (server and client use) into dir, and returns the TLS files
// of each name.
func testTLS(t testing.TB, dir string, names ...string) map[string]*TLS {
	t.Helper()
	ca := certtest.NewCA(t, dir, "ca")
	out := map[string]*TLS{}
	for _, n := range names {
		cert, key := ca.NodeCert(t, dir, n)
		out[n] = &TLS{CACert: ca.File, Cert: cert, Key: key}
	}
	return out
}

// TestLazyMigrationTLS moves a counting tree lazily with its memory over
// mutual TLS: a restorer whose certificate another CA issued gets no
// page and the original is left as it was; one of the same CA moves it.
func TestLazyMigrationTLS(t *testing.T) {
	bin := requireCriu(t)
	if _, err := os.Stat("/proc/sys/vm/unprivileged_userfaultfd"); err != nil {
		testutil.Skip(t, "kernel without userfaultfd: %v", err)
	}
	certs := testTLS(t, t.TempDir(), "source", "target")
	stranger := testTLS(t, t.TempDir(), "stranger")["stranger"]
	pid, count := startInPidNS(t, 16)
	tg, err := PIDTarget("/proc", pid, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	t.Run("stranger refused", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		archive, ps, ckErr := publishLazily(ctx, t, bin, tg, certs["source"], nil)
		rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
		_, rerr := Restore(rctx, archive, RestoreOptions{Binary: bin, WorkRoot: t.TempDir(), LazyFrom: &ps, LazyTLS: stranger})
		rcancel()
		if rerr == nil {
			t.Fatal("a restorer with another CA's certificate restored the tree")
		}
		t.Logf("refused: %v", rerr)
		cancel()
		if err := <-ckErr; err == nil {
			t.Error("the lazy checkpoint succeeded although no restore fetched its memory")
		}
		// The original is left running, as it was.
		before := waitCount(t, count)
		testutil.Eventually(t, fmt.Sprintf("the original pid %d counts past %d", pid, before), func() error {
			if n, err := readCount(count); err != nil || n <= before {
				return fmt.Errorf("count %d, %v", n, err)
			}
			return nil
		})
	})

	t.Run("same CA", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		archive, ps, ckErr := publishLazily(ctx, t, bin, tg, certs["source"], nil)
		rst, rerr := Restore(ctx, archive, RestoreOptions{Binary: bin, WorkRoot: t.TempDir(), LazyFrom: &ps, LazyTLS: certs["target"]})
		if err := <-ckErr; err != nil || rerr != nil {
			t.Fatalf("lazy move over TLS: checkpoint: %v; restore: %v", err, rerr)
		}
		t.Cleanup(func() {
			_ = syscall.Kill(rst.Pid, syscall.SIGKILL)
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(rst.Pid, &ws, 0, nil)
		})
		before := waitCount(t, count)
		if st, err := ReadProcState("/proc", pid); err == nil && !st.Gone() {
			t.Errorf("the original pid %d is still there (%s) after its memory was fetched", pid, st)
		}
		testutil.Eventually(t, fmt.Sprintf("the restored tree (pid %d) counts past %d", rst.Pid, before), func() error {
			if n, err := readCount(count); err != nil || n <= before {
				return fmt.Errorf("count %d, %v", n, err)
			}
			return nil
		})
	})
}
