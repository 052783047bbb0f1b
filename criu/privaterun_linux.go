package criu

import (
	"fmt"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// privateRun starts commands from one OS thread that has a mount
// namespace of its own with an empty tmpfs on a directory, so that criu
// processes started through it keep their kernel facts there
// (criu/kerndat.c saves criu.kdat only on a tmpfs) for one another, where
// the directory itself would keep none: /run on a disk, or a container's
// /run, which containerd's CRI leaves to the image (oci.WithoutRunMount).
// Nothing outside the namespace sees the tmpfs; it goes away with the
// thread and the processes started in it.
type privateRun struct {
	reqs chan startReq
	done chan struct{}
}

type startReq struct {
	cmd *exec.Cmd
	err chan<- error
}

// newPrivateRun makes the thread and its namespace, with a tmpfs on dir.
// It needs CAP_SYS_ADMIN.
func newPrivateRun(dir string) (*privateRun, error) {
	pr := &privateRun{reqs: make(chan startReq), done: make(chan struct{})}
	ready := make(chan error)
	offLeader(func() {
		defer close(pr.done)
		if err := enterPrivateTmpfs(dir); err != nil {
			ready <- err
			return
		}
		close(ready)
		// exec.Cmd.Start forks from the calling thread, so each child
		// inherits this thread's namespace.
		for r := range pr.reqs {
			r.err <- r.cmd.Start()
		}
	})
	if err := <-ready; err != nil {
		<-pr.done
		return nil, err
	}
	return pr, nil
}

// offLeader runs f in a new goroutine locked, for good, to an OS thread
// that is not the process's main thread. The lock is never undone: the
// thread's mount namespace and filesystem context (unshare(CLONE_NEWNS)
// implies CLONE_FS) become f's own, so the runtime ends the thread when f
// returns instead of handing it to other goroutines. The main thread
// cannot end, only be wedged, and /proc/self names it: left in f's
// namespace it would show every reader of /proc/self/mountinfo that
// namespace, missing each mount made after it, for the life of the
// process. So while the goroutine that starts f holds the main thread, f
// cannot be scheduled onto it.
func offLeader(f func()) {
	started := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		runOffLeader(started, f)
	}()
	<-started
}

// runOffLeader is offLeader's goroutine, called locked to its thread: it
// runs f there unless that is the main thread, and else in a goroutine of
// its own, locked before the main thread is let go. It closes started
// once f's goroutine is locked to the thread f runs on.
func runOffLeader(started chan struct{}, f func()) {
	if unix.Gettid() != unix.Getpid() {
		close(started)
		f()
		return
	}
	go func() {
		runtime.LockOSThread()
		close(started)
		f()
	}()
	<-started
	runtime.UnlockOSThread()
}

// enterPrivateTmpfs moves the calling thread into a new mount namespace in
// which nothing propagates back, and mounts an empty tmpfs on dir there.
func enterPrivateTmpfs(dir string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=1m"); err != nil {
		return fmt.Errorf("mount a tmpfs on %s: %w", dir, err)
	}
	return nil
}

// start starts cmd in the namespace; it is a starter.
func (pr *privateRun) start(cmd *exec.Cmd) error {
	ch := make(chan error, 1)
	pr.reqs <- startReq{cmd: cmd, err: ch}
	return <-ch
}

// close ends the thread once every start has returned.
func (pr *privateRun) close() {
	close(pr.reqs)
	<-pr.done
}
