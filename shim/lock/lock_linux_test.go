package lock

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

const envChild = "NODESHIM_LOCK_TEST_CHILD"

// TestMain doubles as the lock holder of TestHeldByAnotherProcess: run with
// envChild set to a path, it takes the lock, says so and waits for stdin to
// close.
func TestMain(m *testing.M) {
	if p := os.Getenv(envChild); p != "" {
		l, err := Acquire(p, Options{})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("locked")
		buf := make([]byte, 1)
		os.Stdin.Read(buf)
		l.Release()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestSecondAcquireNamesHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "nodeshim.lock")
	l, err := Acquire(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("lock file = %q, %v; want our pid %d", b, err, os.Getpid())
	}
	// flock locks belong to the open file description, so a second open in
	// the same process conflicts just as another process would.
	_, err = Acquire(path, Options{})
	var held *HeldError
	if !errors.As(err, &held) || held.PID != os.Getpid() || held.Path != path {
		t.Fatalf("second Acquire = %v, want HeldError with pid %d", err, os.Getpid())
	}
	if !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Errorf("message %q does not name the pid", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := Acquire(path, Options{})
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	l2.Release()
}

func TestHeldByAnotherProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nodeshim.lock")
	// A stale pid from an earlier run must be overwritten, not appended to.
	if err := os.WriteFile(path, []byte("999999999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("child said %q, %v", line, err)
	}

	_, err = Acquire(path, Options{})
	var held *HeldError
	if !errors.As(err, &held) || held.PID != cmd.Process.Pid {
		t.Fatalf("Acquire = %v, want HeldError naming child pid %d", err, cmd.Process.Pid)
	}

	// With the pid gone from the file (a holder between flock and write),
	// /proc/locks still names the holder.
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(path, Options{})
	if !errors.As(err, &held) || held.PID != cmd.Process.Pid {
		t.Fatalf("Acquire with empty file = %v, want HeldError naming child pid %d from /proc/locks", err, cmd.Process.Pid)
	}

	// SIGKILL: the kernel drops the lock with the process.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	stdin.Close()
	l, err := Acquire(path, Options{})
	if err != nil {
		t.Fatalf("Acquire after holder was killed: %v", err)
	}
	defer l.Release()
}

func TestProcLocksWithoutHolder(t *testing.T) {
	testutil.RequireFile(t, "/proc/locks")
	path := filepath.Join(t.TempDir(), "nodeshim.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if pid := holder(f, "/proc"); pid != 0 {
		t.Errorf("holder of an unlocked file = %d, want 0", pid)
	}
}

func TestParseProcLocks(t *testing.T) {
	tests := []struct {
		name string
		in   string
		maj  uint32
		min  uint32
		ino  uint64
		want int
	}{
		{"flock match", "1: FLOCK  ADVISORY  WRITE 4242 00:1f:5678 0 EOF\n", 0, 0x1f, 5678, 4242},
		{"posix lock ignored", "1: POSIX  ADVISORY  WRITE 11 00:1f:5678 0 EOF\n", 0, 0x1f, 5678, 0},
		{"waiter ignored", "1: FLOCK  ADVISORY  WRITE 4242 00:1f:5678 0 EOF\n1: -> FLOCK  ADVISORY  WRITE 77 00:1f:5678 0 EOF\n", 0, 0x1f, 5678, 4242},
		{"other inode", "2: FLOCK  ADVISORY  WRITE 4242 00:1f:9999 0 EOF\n", 0, 0x1f, 5678, 0},
		{"other device", "2: FLOCK  ADVISORY  WRITE 4242 08:01:5678 0 EOF\n", 0, 0x1f, 5678, 0},
		{"garbage", "nonsense\n\n1:\n", 0, 0x1f, 5678, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := parseProcLocks(bufio.NewScanner(strings.NewReader(tt.in)), tt.maj, tt.min, tt.ino)
			if got != tt.want {
				t.Errorf("parseProcLocks = %d, want %d", got, tt.want)
			}
		})
	}
}

func FuzzParseProcLocks(f *testing.F) {
	f.Add("1: FLOCK  ADVISORY  WRITE 4242 00:1f:5678 0 EOF\n")
	f.Add("1: -> FLOCK  ADVISORY  WRITE 77 00:1f:5678 0 EOF\n2: POSIX ADVISORY READ 1 08:01:2 0 EOF")
	f.Fuzz(func(t *testing.T, in string) {
		pid := parseProcLocks(bufio.NewScanner(strings.NewReader(in)), 0, 0x1f, 5678)
		if pid != 0 && !strings.Contains(in, "00:1f:5678") {
			t.Errorf("pid %d found for a device:inode not in the input", pid)
		}
	})
}

// TestAcquireDir checks the lock of a directory: it lives inside the
// directory, so that a second holder is refused whatever path it names the
// directory by, and it is created with the mode of private state.
func TestAcquireDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	l, err := AcquireDir(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	want := filepath.Join(dir, DirLockName)
	if _, err := Acquire(want, Options{}); err == nil {
		t.Errorf("the root dir's lock is not %s: a second lock of it was taken", want)
	}
	if fi, err := os.Stat(want); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("lock file %s: %v %v, want mode 0600", want, fi.Mode(), err)
	}
	for _, tt := range []struct{ name, dir string }{{"same path", dir}, {"through a symlink", link}} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := AcquireDir(tt.dir, Options{})
			var held *HeldError
			if !errors.As(err, &held) || held.PID != os.Getpid() || !errors.Is(err, errdefs.ErrBusy) {
				t.Fatalf("second AcquireDir(%s) = %v, want a busy HeldError with pid %d", tt.dir, err, os.Getpid())
			}
		})
	}
	t.Run("missing directory", func(t *testing.T) {
		if _, err := AcquireDir(filepath.Join(dir, "nope"), Options{}); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("AcquireDir of a missing directory = %v, want ErrNotExist", err)
		}
	})
	t.Run("not a directory", func(t *testing.T) {
		if _, err := AcquireDir(want, Options{}); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "not a directory") {
			t.Errorf("AcquireDir of a file = %v, want not a directory", err)
		}
	})
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := AcquireDir(link, Options{})
	if err != nil {
		t.Fatalf("AcquireDir after Release: %v", err)
	}
	l2.Release()
}
