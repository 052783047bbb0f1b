package auditlog

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/kernel/seccomp"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// envChild makes the test binary run mkdir under a complain-mode filter
// (TestMain).
const envChild = "NODESHIM_AUDITLOG_TEST_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(envChild); dir != "" {
		// A profile that denies mkdir, in complain mode.
		p, err := seccomp.Parse([]byte(`{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO"}]}`), seccomp.ParseOptions{})
		if err == nil {
			var f *seccomp.Filter
			if f, err = seccomp.Compile(seccomp.Complain(p), seccomp.CompileOptions{}); err == nil {
				err = seccomp.Exec(context.Background(), f, "/bin/mkdir", []string{"mkdir", dir}, nil)
			}
		}
		os.Stderr.WriteString(err.Error())
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// TestFollowComplainMode: a process under a complain-mode filter makes
// the syscall its profile denies; it succeeds, and the kernel's record of
// it is read from the audit netlink socket's read-log group with the
// process's pid, comm and syscall. (The kernel log has the same records
// through a rate limit shared with every other audit record of the node,
// so a test reading it fails whenever the node logs more than 10 records
// in 5 s; its lines are Parse's table test.)
func TestFollowComplainMode(t *testing.T) {
	testutil.RequireRoot(t)
	if _, _, err := seccomp.EnsureActionLogged("/proc", "log"); err != nil {
		t.Fatal(err)
	}
	fl, err := Open(Netlink)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	ctx, cancel := context.WithCancel(context.Background())
	recs := make(chan Record, 64)
	done := make(chan error, 1)
	go func() { done <- fl.Run(ctx, recs) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	dir := filepath.Join(t.TempDir(), "made")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envChild+"="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mkdir under the complain-mode filter: %v: %s", err, out)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Fatalf("mkdir was denied: %v", err)
	}
	pid := cmd.Process.Pid
	deadline := time.After(20 * time.Second)
	for {
		select {
		case r := <-recs:
			if r.PID != pid {
				continue
			}
			name, err := seccomp.SyscallNameByAuditArch(r.Arch, r.Syscall)
			if err != nil {
				t.Fatal(err)
			}
			if r.Action() != RetLog || (name != "mkdir" && name != "mkdirat") || r.Comm != "mkdir" || r.Syscall != unix.SYS_MKDIR && r.Syscall != unix.SYS_MKDIRAT {
				t.Fatalf("record %+v (%s), want mkdir logged", r, name)
			}
			return
		case <-deadline:
			t.Fatalf("no seccomp record of pid %d from %s (lost %d, malformed %d)", pid, Netlink, fl.Lost.Load(), fl.Malformed.Load())
		}
	}
}
