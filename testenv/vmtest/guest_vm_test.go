//go:build vmtest

package vmtest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// envMemoryHog turns the test binary into a process that keeps charging new
// memory to its cgroup (see memoryHog).
const envMemoryHog = "NODESHIM_VMTEST_MEMORY_HOG"

func init() {
	if os.Getenv(envMemoryHog) == "1" {
		memoryHog()
	}
}

// memoryHog maps, touches and unmaps anonymous memory forever, keeping 64 MiB
// resident. Above its cgroup's memory.high every new charge is throttled in
// mem_cgroup_handle_over_high (mm/memcontrol.c), which counts as a memory
// stall for PSI. It runs until the test kills it.
func memoryHog() {
	const chunk, chunks = 4 << 20, 16
	ring := make([][]byte, chunks)
	for i := 0; ; i = (i + 1) % chunks {
		if ring[i] != nil {
			_ = unix.Munmap(ring[i])
		}
		b, err := unix.Mmap(-1, 0, chunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANONYMOUS|unix.MAP_PRIVATE)
		if err != nil {
			fmt.Fprintln(os.Stderr, "memory hog: mmap:", err)
			os.Exit(1)
		}
		for off := 0; off < chunk; off += os.Getpagesize() {
			b[off] = 1
		}
		ring[i] = b
	}
}

// TestGuestMounts checks what the init script promises every guest test.
func TestGuestMounts(t *testing.T) {
	label := testutil.RequireGuest(t)
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatalf("uname: %v", err)
	}
	if release := unix.ByteSliceToString(uts.Release[:]); !strings.HasPrefix(release, label+".") {
		t.Errorf("NODESHIM_GUEST=%s but the kernel is %s", label, release)
	}
	if got := os.Getenv(testutil.EnvRequirePrivileged); got != "1" {
		t.Errorf("%s=%q in the guest, want 1", testutil.EnvRequirePrivileged, got)
	}
	if os.Geteuid() != 0 {
		t.Errorf("guest tests run as uid %d, want root", os.Geteuid())
	}
	cases := []struct {
		name  string
		path  string
		magic int64
	}{
		{"procfs", "/proc", unix.PROC_SUPER_MAGIC},
		{"sysfs", "/sys", unix.SYSFS_MAGIC},
		{"devtmpfs", "/dev", unix.TMPFS_MAGIC},
		{"cgroup2", "/sys/fs/cgroup", unix.CGROUP2_SUPER_MAGIC},
		{"tracefs", "/sys/kernel/tracing", unix.TRACEFS_MAGIC},
		{"bpffs", "/sys/fs/bpf", unix.BPF_FS_MAGIC},
		{"tmpfs", "/tmp", unix.TMPFS_MAGIC},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := statfsMagic(t, tc.path); got != tc.magic {
				t.Errorf("%s has file system magic %#x, want %#x (%s)", tc.path, got, tc.magic, tc.name)
			}
		})
	}
}

// TestGuestPureCgroup2 checks that the guest is a pure cgroup v2 host whose
// root hands the memory controller to its children.
func TestGuestPureCgroup2(t *testing.T) {
	testutil.RequireGuest(t)
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 2 && fields[2] == "cgroup" {
			t.Errorf("cgroup v1 hierarchy mounted in the guest: %s", sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read /proc/self/mounts: %v", err)
	}
	for _, file := range []string{"cgroup.controllers", "cgroup.subtree_control"} {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", file))
		if err != nil {
			t.Fatal(err)
		}
		controllers := strings.Fields(string(b))
		for _, want := range []string{"cpu", "io", "memory", "pids"} {
			if !contains(controllers, want) {
				t.Errorf("/sys/fs/cgroup/%s = %q lacks %s", file, controllers, want)
			}
		}
	}
}

// openTrigger registers a PSI trigger on a pressure file
// (Documentation/accounting/psi.rst: write "some|full <stall us> <window us>"
// to an fd opened for writing; poll() then reports POLLPRI when it fires).
func openTrigger(t *testing.T, path, trigger string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { f.Close() })
	// psi_write (kernel/sched/psi.c) overwrites the last byte written with
	// a NUL before parsing, so the trigger is written with its terminator.
	if _, err := f.Write([]byte(trigger + "\x00")); err != nil {
		t.Fatalf("write PSI trigger %q to %s: %v", trigger, path, err)
	}
	return f
}

// TestGuestPSITriggers registers a memory pressure trigger on the system and
// on a fresh cgroup, drives the cgroup over memory.high and waits until
// poll() reports both triggers fired. The wait is bounded by the test
// binary's -test.timeout and the harness's guest timeout.
func TestGuestPSITriggers(t *testing.T) {
	testutil.RequireGuest(t)
	testutil.RequireFile(t, "/proc/pressure/memory")

	cg := filepath.Join("/sys/fs/cgroup", fmt.Sprintf("nodeshim-vmtest-%d", os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatalf("create cgroup: %v", err)
	}
	t.Cleanup(func() {
		if err := os.Remove(cg); err != nil {
			t.Errorf("remove cgroup %s: %v", cg, err)
		}
	})
	if err := os.WriteFile(filepath.Join(cg, "memory.high"), []byte("8M"), 0); err != nil {
		t.Fatalf("set memory.high: %v", err)
	}
	const trigger = "some 100000 1000000" // 100 ms of stall in a 1 s window
	triggers := []*os.File{
		openTrigger(t, "/proc/pressure/memory", trigger),
		openTrigger(t, filepath.Join(cg, "memory.pressure"), trigger),
	}
	fds := make([]unix.PollFd, len(triggers))
	for i, f := range triggers {
		fds[i] = unix.PollFd{Fd: int32(f.Fd()), Events: unix.POLLPRI}
	}
	// Nothing has stalled yet: a registered trigger polls clean.
	if n, err := unix.Poll(fds, 0); err != nil || n != 0 {
		t.Fatalf("poll before any pressure = %d, %v; revents %+v", n, err, fds)
	}

	dir, err := os.Open(cg)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	hog := exec.Command(os.Args[0], "-test.run=^$")
	hog.Env = append(os.Environ(), envMemoryHog+"=1")
	hog.Stderr = os.Stderr
	// clone3(CLONE_INTO_CGROUP), Linux 5.7: the hog is charged to cg from its first page.
	hog.SysProcAttr = &unix.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}
	if err := hog.Start(); err != nil {
		t.Fatalf("start memory hog in %s: %v", cg, err)
	}
	defer func() {
		_ = hog.Process.Kill()
		_ = hog.Wait()
	}()

	fired := make([]bool, len(fds))
	for !fired[0] || !fired[1] {
		for i := range fds {
			fds[i].Revents = 0
		}
		if _, err := unix.Poll(fds, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			t.Fatalf("poll PSI triggers: %v", err)
		}
		for i, fd := range fds {
			if fd.Revents&(unix.POLLERR|unix.POLLNVAL) != 0 {
				t.Fatalf("poll %s: revents %#x", triggers[i].Name(), fd.Revents)
			}
			if fd.Revents&unix.POLLPRI != 0 {
				fired[i] = true
				fds[i].Events = 0 // an edge until the window passes: stop asking
			}
		}
	}
	pressure, err := os.ReadFile(filepath.Join(cg, "memory.pressure"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("both triggers fired; %s/memory.pressure:\n%s", cg, pressure)
}
