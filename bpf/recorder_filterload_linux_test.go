package bpf

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// filterExec is the "filter-exec" workload: with args "seccomp|prctl N M
// PROGRAM", it probes seccomp(2) as libseccomp does (a NULL program:
// EFAULT, nothing installed), calls sysinfo N times, installs an allow-all
// filter with seccomp(2) or prctl(2), calls uname M times and executes
// PROGRAM: a runtime's init in small.
func filterExec(args []string) int {
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "filter-exec: %s: %v\n", what, err)
		return 1
	}
	if len(args) != 4 {
		return fail("args", fmt.Errorf("want seccomp|prctl N M PROGRAM, got %q", args))
	}
	n, err1 := strconv.Atoi(args[1])
	m, err2 := strconv.Atoi(args[2])
	if err1 != nil || err2 != nil {
		return fail("args", fmt.Errorf("%v %v", err1, err2))
	}
	// The filter covers the calling thread; keep the rest on it.
	runtime.LockOSThread()
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, 0); e != unix.EFAULT {
		return fail("probe seccomp with a NULL program", e)
	}
	var si unix.Sysinfo_t
	for range n {
		if err := unix.Sysinfo(&si); err != nil {
			return fail("sysinfo", err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fail("no_new_privs", err)
	}
	allow := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW}}
	prog := unix.SockFprog{Len: uint16(len(allow)), Filter: &allow[0]}
	switch args[0] {
	case "seccomp":
		if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog))); e != 0 {
			return fail("seccomp", e)
		}
	case "prctl":
		if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0); err != nil {
			return fail("prctl", err)
		}
	default:
		return fail("args", fmt.Errorf("unknown load %q", args[0]))
	}
	var u unix.Utsname
	for range m {
		if err := unix.Uname(&u); err != nil {
			return fail("uname", err)
		}
	}
	return fail("exec", unix.Exec(args[3], []string{args[3]}, nil))
}

// TestRecorderFromFilterLoad records a process tree with FromFilterLoad: a
// process that probes seccomp(2) with a NULL program, calls sysinfo, loads
// a filter, calls uname and executes a program. Only the uname calls and
// the execve are counted: nothing before the load, nothing of the new
// program (/bin/true's exit_group); the Go workload loaded its filter with
// signal handlers installed. Without FromFilterLoad the same run
// counts the sysinfo calls and the new program too.
func TestRecorderFromFilterLoad(t *testing.T) {
	requireBPF(t)
	trueBin := "/bin/true"
	if _, err := os.Stat(trueBin); err != nil {
		t.Fatal(err)
	}
	const before, after = 7, 5
	cases := []struct {
		name, load string
		window     bool
	}{
		{name: "seccomp", load: "seccomp", window: true},
		{name: "prctl", load: "prctl", window: true},
		{name: "whole process", load: "seccomp", window: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var rec *Recorder
			cmd := workloadCommand("filter-exec", tc.load, strconv.Itoa(before), strconv.Itoa(after), trueBin)
			gatedRun(t, cmd, func(pid int) {
				tgt := ProcessTreeTarget(uint32(pid))
				tgt.FromFilterLoad = tc.window
				var err error
				if rec, err = NewRecorder(tgt); err != nil {
					t.Fatal(err)
				}
			})
			defer rec.Close()
			counts, err := rec.Counts()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]uint64{}
			for _, nr := range []uint32{unix.SYS_SYSINFO, unix.SYS_UNAME, unix.SYS_EXECVE, unix.SYS_EXIT_GROUP, unix.SYS_SECCOMP} {
				got[mustName(t, nr)] = countOf(counts, nr)
			}
			want := map[string]uint64{"sysinfo": 0, "uname": after, "execve": 1, "exit_group": 0, "seccomp": 0}
			if !tc.window {
				// The whole process: both seccomp calls, the execve
				// and /bin/true's exit.
				want = map[string]uint64{"sysinfo": before, "uname": after, "execve": 1, "exit_group": 1, "seccomp": 2}
				if tc.load == "prctl" {
					want["seccomp"] = 1
				}
			}
			for name, w := range want {
				// Go's runtime may call uname or sysinfo itself
				// (never both exactly); the workload's are exact
				// lower bounds, and zero stays zero.
				if g := got[name]; (w == 0 && g != 0) || g < w || (name == "execve" && g != w) {
					t.Errorf("%s counted %d times, want %d (all: %v)", name, g, w, got)
				}
			}
			// Go's runtime installs its signal handlers at start: a
			// signal may come in the window and return through
			// rt_sigreturn.
			handlers, err := rec.HandlersAtFilterLoad()
			if err != nil || handlers != tc.window {
				t.Errorf("HandlersAtFilterLoad = %t, %v, want %t", handlers, err, tc.window)
			}
			if err := rec.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func mustName(t *testing.T, nr uint32) string {
	t.Helper()
	name, err := SyscallName(nr)
	if err != nil {
		t.Fatal(err)
	}
	return name
}
