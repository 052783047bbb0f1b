package criu

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// envLeaderChild makes the test binary the child of
// TestPrivateRunSparesMainThread: its main goroutine is locked to the
// main thread from init on, so that runOffLeader starts there.
const envLeaderChild = "NODESHIM_TEST_PRIVATERUN_LEADER"

func init() {
	if os.Getenv(envLeaderChild) != "" {
		runtime.LockOSThread()
	}
}

// runLeaderChild calls runOffLeader on the main thread with a function
// that enters a private mount namespace with a tmpfs on dir, and prints
// what a reader of /proc/self sees afterwards: the main thread's mount
// namespace must still be the process's first, and dir not a tmpfs.
func runLeaderChild(dir string) {
	fail := func(format string, a ...any) {
		fmt.Printf("FAIL "+format+"\n", a...)
		os.Exit(1)
	}
	if unix.Gettid() != unix.Getpid() {
		fail("the child's main goroutine is on thread %d, not the main thread %d", unix.Gettid(), unix.Getpid())
	}
	before, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		fail("%v", err)
	}
	started, entered := make(chan struct{}), make(chan error, 1)
	var tid int
	runOffLeader(started, func() {
		tid = unix.Gettid()
		entered <- enterPrivateTmpfs(dir)
	})
	if err := <-entered; err != nil {
		fail("enter the private namespace: %v", err)
	}
	after, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		fail("%v", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		fail("%v", err)
	}
	switch {
	case tid == unix.Getpid():
		fail("the private namespace was entered on the main thread")
	case after != before:
		fail("/proc/self/ns/mnt changed from %s to %s", before, after)
	case st.Type == unix.TMPFS_MAGIC:
		fail("the main thread sees the private tmpfs on %s", dir)
	}
	fmt.Printf("OK thread %d, main thread %d in %s\n", tid, unix.Getpid(), after)
}

// TestPrivateRunSparesMainThread: a privateRun whose goroutine starts on
// the process's main thread moves to another thread before it enters its
// mount namespace. The main thread is what /proc/self names and cannot
// end: left in the private namespace, every later reader of
// /proc/self/mountinfo would miss the mounts made after it, as a sweep
// looking for an encrypted checkpoint's tmpfs did.
func TestPrivateRunSparesMainThread(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), envLeaderChild+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "OK ") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
