package seccomp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/nodeshim/nodeshim/testenv/testutil"
	"golang.org/x/sys/unix"
)

// runUnder runs argv under the compiled testdata profile and returns its
// stdout, stderr and wait error.
func runUnder(t *testing.T, profile string, argv ...string) (string, string, *exec.Cmd, error) {
	t.Helper()
	_, f := loadTestdata(t, profile, CompileOptions{})
	return runFilter(t, f, argv...)
}

func runFilter(t *testing.T, f *Filter, argv ...string) (string, string, *exec.Cmd, error) {
	t.Helper()
	path := testutil.RequireBinary(t, argv[0])
	cmd, done, err := commandWith(selfExe, f, path, argv...)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	return stdout.String(), stderr.String(), cmd, err
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("not an exit error: %v", err)
	}
	return ee.ExitCode()
}

// TestDenyMkdir: mkdir fails with EACCES and nothing else is affected.
func TestDenyMkdir(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	out, stderr, _, err := runUnder(t, "deny-mkdir.json", "sh", "-c",
		`mkdir "$1/d"; echo "mkdir=$?"; touch "$1/f" && echo touched; rm "$1/f" && echo removed`, "sh", dir)
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	if out != "mkdir=1\ntouched\nremoved\n" || !strings.Contains(stderr, "Permission denied") {
		t.Errorf("stdout %q stderr %q", out, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "d")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory was created: %v", err)
	}
	// The errno itself, from the probe child.
	_, f := loadTestdata(t, "deny-mkdir.json", CompileOptions{})
	// A pointer of -1: an allowed mkdir fails with EFAULT, so EACCES is
	// the filter's answer.
	recs := []probeRecord{{Nr: unix.SYS_MKDIR, Args: baseArgs("mkdir")}, {Nr: unix.SYS_RMDIR, Args: baseArgs("rmdir")}}
	if _, err := runProbes(context.Background(), f, recs); err != nil {
		t.Fatal(err)
	}
	if unix.Errno(recs[0].Errno) != unix.EACCES || unix.Errno(recs[1].Errno) != unix.EFAULT {
		t.Errorf("mkdir: %s, want EACCES; rmdir: %s, want EFAULT", observed(recs[0]), observed(recs[1]))
	}
}

// TestPersonalityArgFilter: personality is denied unless arg0 == 0.
func TestPersonalityArgFilter(t *testing.T) {
	testutil.RequireRoot(t)
	_, stderr, _, err := runUnder(t, "personality-arg.json", "setarch", "x86_64", "-R", "true")
	if exitCode(t, err) == 0 || !strings.Contains(stderr, "Operation not permitted") {
		t.Errorf("setarch -R (ADDR_NO_RANDOMIZE): %v %q", err, stderr)
	}
	if _, stderr, _, err := runUnder(t, "personality-arg.json", "setarch", "x86_64", "true"); err != nil {
		t.Errorf("setarch x86_64 (PER_LINUX, arg0 == 0): %v %q", err, stderr)
	}
}

// TestKillProcess: dash calls getppid(2) at start-up for $PPID, which the
// profile answers with KILL_PROCESS.
func TestKillProcess(t *testing.T) {
	testutil.RequireRoot(t)
	out, _, _, err := runUnder(t, "kill-process.json", "sh", "-c", "echo $PPID")
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("got %v, output %q", err, out)
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGSYS || out != "" {
		t.Errorf("status %v, output %q; want death by SIGSYS", ws, out)
	}
}

// TestLogAction: SCMP_ACT_LOG lets uname(2) run and the kernel emits an
// audit record (type 1326, AUDIT_SECCOMP) with the LOG action code. The
// record is read from the audit netlink multicast group, which every
// record reaches whether or not auditd runs and without the printk rate
// limit of the kernel log.
func TestLogAction(t *testing.T) {
	testutil.RequireRoot(t)
	b, err := os.ReadFile("/proc/sys/kernel/seccomp/actions_logged")
	if err != nil || !strings.Contains(string(b), "log") {
		testutil.Skip(t, "kernel.seccomp.actions_logged %q does not log SECCOMP_RET_LOG: %v", b, err)
	}
	const auditNlgrpReadlog = 1 // AUDIT_NLGRP_READLOG, include/uapi/linux/audit.h
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_AUDIT)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1 << (auditNlgrpReadlog - 1)}); err != nil {
		t.Fatalf("bind audit multicast group: %v", err)
	}
	out, stderr, cmd, err := runUnder(t, "log.json", "uname", "-s")
	if err != nil || out != "Linux\n" {
		t.Fatalf("uname under LOG: %v %q %q", err, out, stderr)
	}
	want := []string{fmt.Sprintf("pid=%d ", cmd.Process.Pid), fmt.Sprintf("syscall=%d ", unix.SYS_UNAME), "code=0x7ffc0000"}
	buf := make([]byte, 1<<16)
	var seen []string
	for {
		// The syscall queues its record for kauditd, a kernel thread that
		// multicasts it later: on a busy machine after the command has
		// ended. So wait for it (go test's -timeout bounds the wait) rather
		// than read only what has arrived; an error of the socket itself
		// ends the search.
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Errorf("read the audit multicast group: %v", err)
			break
		}
		// One record a datagram: struct nlmsghdr, then the text. (Audit's
		// nlmsg_len does not always follow netlink's alignment rules, so
		// the datagram is not parsed as a netlink message stream.)
		if n < unix.NLMSG_HDRLEN {
			continue
		}
		typ := binary.NativeEndian.Uint16(buf[4:6])
		line := string(buf[unix.NLMSG_HDRLEN:n])
		seen = append(seen, fmt.Sprintf("type=%d %s", typ, line))
		ok := typ == 1326 // AUDIT_SECCOMP
		for _, w := range want {
			ok = ok && strings.Contains(line, w)
		}
		if ok {
			return
		}
	}
	t.Errorf("no AUDIT_SECCOMP record with %q among %d records:\n%s", want, len(seen), strings.Join(seen, "\n"))
}

// TestCommandInstallsWithTSync checks what the command runs under: its own
// pid (the seccomp child execs in place), no_new_privs, filter mode, one
// filter.
func TestCommandInstallsWithTSync(t *testing.T) {
	testutil.RequireRoot(t)
	out, stderr, cmd, err := runUnder(t, "runtime-default.json", "sh", "-c", `echo $$; grep -E "^(NoNewPrivs|Seccomp|Seccomp_filters):" /proc/self/status`)
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	want := strconv.Itoa(cmd.Process.Pid) + "\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\n"
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	// The calling process stays unfiltered.
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(status), "\nSeccomp:\t0\n") {
		t.Errorf("test process is filtered:\n%s", status)
	}
}

// TestRuntimeDefaultRunsRealPrograms runs ordinary programs under the
// RuntimeDefault-like profile, and checks what it refuses.
func TestRuntimeDefaultRunsRealPrograms(t *testing.T) {
	testutil.RequireRoot(t)
	tests := []struct {
		name   string
		argv   []string
		code   int
		stdout string
		stderr string
	}{
		{"shell pipeline", []string{"sh", "-c", "ls / | grep -c proc; uname -s"}, 0, "1\nLinux\n", ""},
		{"unshare user namespace", []string{"unshare", "-U", "true"}, 1, "", "Operation not permitted"},
		{"setarch -R", []string{"setarch", "x86_64", "-R", "true"}, 1, "", "Operation not permitted"},
		{"getent hosts from /etc/hosts", []string{"getent", "hosts", "localhost"}, 0, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, _, err := runUnder(t, "runtime-default.json", tc.argv...)
			if got := exitCode(t, err); got != tc.code {
				t.Fatalf("exit %d, want %d: %q %q", got, tc.code, out, stderr)
			}
			if tc.stdout != "" && out != tc.stdout {
				t.Errorf("stdout %q, want %q", out, tc.stdout)
			}
			if !strings.Contains(stderr, tc.stderr) {
				t.Errorf("stderr %q, want %q", stderr, tc.stderr)
			}
		})
	}
}

// TestCommandExecDenied: a profile that denies execve leaves the child
// unable to run the command: exit 126, and the command never ran.
func TestCommandExecDenied(t *testing.T) {
	testutil.RequireRoot(t)
	p := mustParse(t, `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["execve","execveat"],"action":"SCMP_ACT_ERRNO","errnoRet":13}]}`)
	f, err := Compile(p, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	echo := testutil.RequireBinary(t, "echo") // the path runFilter executes
	out, stderr, _, err := runFilter(t, f, "echo", "ran")
	if exitCode(t, err) != 126 || out != "" || !strings.Contains(stderr, "execve "+echo+": Permission denied") {
		t.Errorf("exit %v, stdout %q, stderr %q", err, out, stderr)
	}
}

// TestVerifyFindsMismatches proves Verify is not vacuous: a filter compiled
// from another profile disagrees with the profile's meaning.
func TestVerifyFindsMismatches(t *testing.T) {
	testutil.RequireRoot(t)
	p, _ := loadTestdata(t, "deny-mkdir.json", CompileOptions{})
	_, other := loadTestdata(t, "kill-process.json", CompileOptions{})
	rep, err := Verify(context.Background(), p, other, VerifyOptions{Sample: 8})
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string]bool{}
	for _, r := range rep.Results {
		if r.Status == StatusMismatch {
			bad[r.Syscall] = true
		}
	}
	if !bad["mkdir"] || !bad["mkdirat"] || rep.Mismatches != len(bad) {
		t.Errorf("mismatches %v (%d)", bad, rep.Mismatches)
	}
	// And the other way round: getppid is expected to kill, but runs.
	p2, _ := loadTestdata(t, "kill-process.json", CompileOptions{})
	_, f2 := loadTestdata(t, "deny-mkdir.json", CompileOptions{})
	rep, err = Verify(context.Background(), p2, f2, VerifyOptions{Sample: -1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Mismatches != 3 {
		for _, r := range rep.Results {
			t.Logf("%+v", r)
		}
		t.Errorf("%d mismatches, want 3 (getppid, getpgrp, getsid)", rep.Mismatches)
	}
}

// TestMalformedProfileInstallsNothing: parsing fails, so there is no
// filter to hand to Command or Exec, and the process stays unfiltered.
func TestMalformedProfileInstallsNothing(t *testing.T) {
	testutil.RequireRoot(t)
	files, _ := filepath.Glob("testdata/invalid/*.json")
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if p, err := Parse(b, ParseOptions{}); err == nil {
			t.Errorf("%s parsed: %+v", path, p)
		}
	}
	var mode int
	if mode, _ = unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); mode != 0 {
		t.Errorf("PR_GET_SECCOMP = %d", mode)
	}
}

func TestNotifyRefusedByCommand(t *testing.T) {
	_, f := loadTestdata(t, "trace-notify.json", CompileOptions{})
	if _, _, err := commandWith(selfExe, f, "/bin/true", "true"); !errors.Is(err, ErrNotifyExec) {
		t.Errorf("got %v", err)
	}
	if err := Exec(context.Background(), f, "/bin/true", []string{"true"}, nil); !errors.Is(err, ErrNotifyExec) {
		t.Errorf("got %v", err)
	}
}

// TestCommandUnprivileged: with no_new_privs an unprivileged process may
// load a filter (no CAP_SYS_ADMIN needed). A copy of this test binary runs
// as nobody with no capabilities and loads the filter before exec.
func TestCommandUnprivileged(t *testing.T) {
	testutil.RequireRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// t.TempDir's parent is private to root; /tmp itself is searchable.
	dir, err := os.MkdirTemp("", "nodeshim-seccomp-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for d := filepath.Dir(dir); d != "/" && d != "."; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil || st.Mode().Perm()&0o001 == 0 {
			testutil.Skip(t, "%s is not searchable by other users: %v", d, err)
		}
	}
	exe := filepath.Join(dir, "seccomp.test")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	_, f := loadTestdata(t, "deny-mkdir.json", CompileOptions{})
	sh := testutil.RequireBinary(t, "sh")
	cmd, done, err := commandWith(exe, f, sh, "sh", "-c", `id -u; grep -E "^(CapEff|NoNewPrivs|Seccomp):" /proc/self/status; mkdir /tmp/nodeshim-unpriv-$$ 2>&1 | grep -o "Permission denied"`)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := "65534\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\nPermission denied\n"
	if string(out) != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
}
