package cgroup

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// v1Memory is the v1 memory hierarchy of a hybrid node.
const v1Memory = "/sys/fs/cgroup/memory"

// thrashMain runs in a child process: it waits for one byte on stdin (the
// parent moves it into its cgroups first), then touches random pages of a
// file mapping larger than its memory limit, so every touch risks a
// refault of a page it just lost: the memory stall PSI accounts. It stops
// when the parent closes stdin.
//
// With the spec "anon:<MiB>" it instead holds that much anonymous memory
// and keeps faulting in and releasing more: over memory.high, each charge
// throttles the task in mem_cgroup_handle_over_high, a memory stall PSI
// accounts, without a disk (a guest booted from an initramfs has none).
func thrashMain(path string) int {
	if mib, ok := strings.CutPrefix(path, "anon:"); ok {
		return thrashAnon(mib)
	}
	var b [1]byte
	if _, err := os.Stdin.Read(b[:]); err != nil {
		fmt.Fprintln(os.Stderr, "wait for start:", err)
		return 2
	}
	go func() {
		_, _ = os.Stdin.Read(b[:])
		os.Exit(0)
	}()
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	st, _ := f.Stat()
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pages := len(m) / 4096
	// Several threads fault at once, so that some task of the cgroup is
	// almost always waiting for reclaim or a refault: PSI's "some". Page
	// faults do not release a P, hence GOMAXPROCS above the thread count.
	const threads = 8
	runtime.GOMAXPROCS(threads)
	// The sum goes through an atomic so that the compiler keeps the loads.
	var sum atomic.Uint32
	for range threads - 1 {
		go func() {
			for {
				sum.Add(uint32(m[rand.IntN(pages)*4096]))
			}
		}()
	}
	for {
		sum.Add(uint32(m[rand.IntN(pages)*4096]))
	}
}

func thrashAnon(mib string) int {
	n, err := strconv.Atoi(mib)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad size", mib)
		return 2
	}
	var b [1]byte
	if _, err := os.Stdin.Read(b[:]); err != nil {
		fmt.Fprintln(os.Stderr, "wait for start:", err)
		return 2
	}
	go func() {
		_, _ = os.Stdin.Read(b[:])
		os.Exit(0)
	}()
	hold, err := unix.Mmap(-1, 0, n<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for i := 0; i < len(hold); i += 4096 {
		hold[i] = 1
	}
	for {
		c, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for i := 0; i < len(c); i += 4096 {
			c[i] = 1
		}
		_ = unix.Munmap(c)
	}
}

// thrashDir is where newThrasher writes its file; it must be on a disk.
const thrashDir = "/var/tmp"

// onDisk reports whether dir is on a filesystem whose page cache the kernel
// reclaims and faults back in: not tmpfs or ramfs, whose pages are
// swap-backed or pinned.
func onDisk(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false
	}
	return st.Type != unix.TMPFS_MAGIC && st.Type != unix.RAMFS_MAGIC
}

// newMemoryStaller starts a child that makes the cgroup2 cgroup v2, limited
// in memory below fileSize (64 MiB by thrashCgroups, 32 MiB by detectOnce),
// stall on memory once it begins: where thrashDir is on a disk by
// refaulting a file of fileSize bytes (newThrasher), else (a machine booted
// from an initramfs has no disk) by holding 24 MiB of anonymous memory over
// a memory.high of 16 MiB, set here, and charging more.
func newMemoryStaller(t testing.TB, v2 string, fileSize int64) *thrasher {
	t.Helper()
	if onDisk(thrashDir) {
		return newThrasher(t, fileSize)
	}
	if err := os.WriteFile(filepath.Join(v2, "memory.high"), []byte("16M"), 0); err != nil {
		t.Fatalf("%s is not on a disk to thrash a file from, and there is no memory.high to throttle with: %v", thrashDir, err)
	}
	return startThrasher(t, "anon:24")
}

// thrasher is a started thrashing child.
type thrasher struct {
	cmd   *exec.Cmd
	start *os.File
}

// newThrasher prepares a file of size bytes whose page cache is dropped
// (so its pages are charged to the thrasher when it faults them in) and
// starts a child that waits for go().
func newThrasher(t testing.TB, size int64) *thrasher {
	t.Helper()
	// Not a tmpfs: tmpfs pages are swap-backed and cannot be reclaimed
	// without swap, which would OOM-kill the child instead of thrashing it.
	dir, err := os.MkdirTemp(thrashDir, "nodeshim-thrash-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "data")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		for i := range buf {
			buf[i] = byte(off>>20) ^ byte(i)
		}
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return startThrasher(t, path)
}

// startThrasher starts the child with spec (a file path, or "anon:<MiB>").
func startThrasher(t testing.TB, spec string) *thrasher {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envThrash+"="+spec)
	cmd.Stdin, cmd.Stderr = r, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	th := &thrasher{cmd: cmd, start: w}
	t.Cleanup(func() {
		th.start.Close()
		if th.cmd.ProcessState == nil {
			_ = th.cmd.Process.Kill()
			_ = th.cmd.Wait()
		}
	})
	return th
}

func (th *thrasher) pid() int { return th.cmd.Process.Pid }

// begin lets the child start thrashing.
func (th *thrasher) begin(t testing.TB) {
	t.Helper()
	if _, err := th.start.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
}

// stop ends the child and waits for it.
func (th *thrasher) stop(t testing.TB) {
	t.Helper()
	th.start.Close()
	if err := th.cmd.Wait(); err != nil {
		t.Fatalf("thrasher: %v", err)
	}
}

// stallOnset samples the pressure file's some total every millisecond and
// sends the time it first moves past its value at the call: the moment the
// cgroup began to stall, the start a detection latency is measured from.
// Once a pressure event has come the total has moved, so the receive does
// not block for long; the channel closes without a value only when ctx ends
// first or the file cannot be read.
func stallOnset(ctx context.Context, path string) <-chan time.Time {
	ch := make(chan time.Time, 1)
	buf := make([]byte, 256)
	base, err := readTotal(path, false, buf)
	if err != nil {
		close(ch)
		return ch
	}
	go func() {
		defer close(ch)
		for ctx.Err() == nil {
			if t, err := readTotal(path, false, buf); err == nil && t > base {
				ch <- time.Now()
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return ch
}
