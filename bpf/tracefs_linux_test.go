package bpf

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/internal/mountinfo"
	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

func TestFindTracefs(t *testing.T) {
	debugfs := t.TempDir()
	if err := os.Mkdir(filepath.Join(debugfs, "tracing"), 0o755); err != nil {
		t.Fatal(err)
	}
	bareDebugfs := t.TempDir()
	cases := []struct {
		name    string
		entries []mountinfo.Entry
		want    string
	}{
		{"nothing mounted", []mountinfo.Entry{{Root: "/", Point: "/sys", FSType: "sysfs"}}, ""},
		{"tracefs at the standard place", []mountinfo.Entry{
			{Root: "/", Point: "/sys", FSType: "sysfs"},
			{Root: "/", Point: "/sys/kernel/tracing", FSType: "tracefs"},
		}, "/sys/kernel/tracing"},
		{"tracefs elsewhere", []mountinfo.Entry{{Root: "/", Point: "/host/sys/kernel/tracing", FSType: "tracefs"}},
			"/host/sys/kernel/tracing"},
		{"a bind of a tracefs directory has no events", []mountinfo.Entry{{Root: "/instances/x", Point: "/t", FSType: "tracefs"}}, ""},
		{"tracefs wins over debugfs", []mountinfo.Entry{
			{Root: "/", Point: debugfs, FSType: "debugfs"},
			{Root: "/", Point: "/sys/kernel/tracing", FSType: "tracefs"},
		}, "/sys/kernel/tracing"},
		{"debugfs with tracing", []mountinfo.Entry{{Root: "/", Point: debugfs, FSType: "debugfs"}}, filepath.Join(debugfs, "tracing")},
		{"debugfs without tracing", []mountinfo.Entry{{Root: "/", Point: bareDebugfs, FSType: "debugfs"}}, ""},
		{"empty table", nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := findTracefs(tc.entries); got != tc.want {
				t.Errorf("findTracefs = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestEnsureTracefsKeepsAMountedOne: a table listing tracefs means no
// mount, whatever the privilege (the target does not exist, so a mount
// would fail).
func TestEnsureTracefsKeepsAMountedOne(t *testing.T) {
	table := filepath.Join(t.TempDir(), "mountinfo")
	line := "40 25 0:13 / /sys/kernel/tracing rw,nosuid,nodev,noexec,relatime shared:17 - tracefs tracefs rw\n"
	if err := os.WriteFile(table, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "absent")
	point, mounted, err := ensureTracefsAt(table, target)
	if err != nil || mounted || point != "/sys/kernel/tracing" {
		t.Fatalf("ensureTracefsAt = %q, %v, %v; want /sys/kernel/tracing, false, nil", point, mounted, err)
	}
}

func TestEnsureTracefsErrors(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := ensureTracefsAt(filepath.Join(dir, "none"), dir); err == nil || !strings.Contains(err.Error(), "none") {
		t.Errorf("missing table: %v, want an error naming it", err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("1 2 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ensureTracefsAt(bad, dir); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("malformed table: %v, want an error naming it", err)
	}
	for _, tc := range []struct {
		errno       unix.Errno
		want        string
		unsupported bool
	}{
		{unix.ENODEV, "CONFIG_TRACING=n", true},
		{unix.ENOENT, "the kernel makes that directory", true},
		{unix.EPERM, "CAP_SYS_ADMIN", false},
		{unix.EBUSY, "device or resource busy", false},
	} {
		err := mountError("/sys/kernel/tracing", tc.errno)
		msg := err.Error()
		if !strings.Contains(msg, "/sys/kernel/tracing") || !strings.Contains(msg, tc.want) || !errors.Is(err, tc.errno) {
			t.Errorf("%v: %q, want the mount point, %q and the errno", tc.errno, msg, tc.want)
		}
		if got := errors.Is(err, ebpf.ErrNotSupported); got != tc.unsupported {
			t.Errorf("%v: ErrNotSupported %v, want %v", tc.errno, got, tc.unsupported)
		}
	}
}

// The modes of the test binary run as a child by the tests below.
const (
	childWatchWithoutTracefs  = "oom-without-tracefs"
	childReportWithoutTracefs = "report-without-tracefs"
	childMountUnprivileged    = "mount-unprivileged"
)

// tracefsChildResult is what a child reports on stdout, as JSON.
type tracefsChildResult struct {
	// Before is where tracefs was mounted after the child unmounted every
	// tracefs it could see ("" when nowhere, as on a fresh machine), and
	// BeforeEvents whether /sys/kernel/tracing/events existed then.
	Before       string
	BeforeEvents bool
	// Err is the product's error, Hook the hook it attached to.
	Err  string
	Hook OOMHook
	// After is where tracefs was mounted after the product ran.
	After string
	// Findings are the report's findings, by requirement id.
	Findings map[string]capability.Finding
}

// runTracefsChild runs the test binary in mode in a mount namespace of its
// own (os/exec makes its mounts private, so nothing propagates back) and
// returns what it reports.
func runTracefsChild(t *testing.T, mode string, attr *syscall.SysProcAttr) tracefsChildResult {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), workloadEnv+"="+mode)
	cmd.SysProcAttr = attr
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child %s: %v\nstdout: %s\nstderr: %s", mode, err, stdout.String(), stderr.String())
	}
	var res tracefsChildResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("child %s output %q: %v\nstderr: %s", mode, stdout.String(), err, stderr.String())
	}
	return res
}

// ownTracefs is where tracefs is mounted in the test's mount namespace.
func ownTracefs(t *testing.T) string {
	t.Helper()
	p, err := currentTracefs()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// checkFreshMachine fails t unless the child saw no tracefs before the
// product ran: the state of a machine that has just booted.
func checkFreshMachine(t *testing.T, res tracefsChildResult) {
	t.Helper()
	if res.Before != "" || res.BeforeEvents {
		t.Fatalf("the child could not unmount tracefs: mounted at %q, events present %v", res.Before, res.BeforeEvents)
	}
}

// TestWatchOOMMountsTracefs runs the OOM watcher on its tracepoint, the
// one hook that attaches through tracefs on every kernel, in a mount
// namespace without tracefs, as on a freshly booted machine: WatchOOM must
// mount tracefs at /sys/kernel/tracing and attach. The mount stays in the
// child's namespace: the test's own mount table is unchanged.
func TestWatchOOMMountsTracefs(t *testing.T) {
	requireBPF(t)
	before := ownTracefs(t)
	res := runTracefsChild(t, childWatchWithoutTracefs, &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS})
	checkFreshMachine(t, res)
	if res.Err != "" {
		t.Fatalf("WatchOOM without tracefs: %s", res.Err)
	}
	if res.Hook != OOMHookTracepoint {
		t.Errorf("attached to %s, want %s", res.Hook, OOMHookTracepoint)
	}
	if res.After != TracefsMountPoint {
		t.Errorf("tracefs after WatchOOM: %q, want %s", res.After, TracefsMountPoint)
	}
	if after := ownTracefs(t); after != before {
		t.Errorf("the test's own tracefs changed from %q to %q: the child's mount leaked", before, after)
	}
}

// TestReportWithoutTracefs runs the report's tracefs and OOM watcher
// probes in a mount namespace without tracefs: the tracepoint is found
// (the probe mounts tracefs as serve does, and says so), and the OOM
// watcher's verdict is the one it gets with tracefs mounted.
func TestReportWithoutTracefs(t *testing.T) {
	requireBPF(t)
	h := kernel.DefaultHost()
	want := capability.Unsupported
	for _, hook := range DefaultOOMHooks() {
		if ok, _ := hookAvailable(h, hook); ok {
			want = capability.Degraded
			if hook == OOMHookFentry || hook == OOMHookRawTracepoint {
				want = capability.Supported
			}
			break
		}
	}
	res := runTracefsChild(t, childReportWithoutTracefs, &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS})
	checkFreshMachine(t, res)
	tp := res.Findings["ebpf.tracefs-oom-mark-victim"]
	t.Logf("tracefs-oom-mark-victim: %s (%s)", tp.Verdict, tp.Evidence)
	if tp.Verdict != capability.Supported || !strings.Contains(tp.Evidence, "mounted at "+TracefsMountPoint) {
		t.Errorf("tracefs-oom-mark-victim: %s (%s), want Supported, saying it mounted tracefs", tp.Verdict, tp.Evidence)
	}
	oom := res.Findings["ebpf.oom-watcher"]
	t.Logf("oom-watcher: %s (%s)", oom.Verdict, oom.Evidence)
	if oom.Verdict != want {
		t.Errorf("oom-watcher: %s (%s), want %s as with tracefs mounted", oom.Verdict, oom.Evidence, want)
	}
	if res.After != TracefsMountPoint {
		t.Errorf("tracefs after the report: %q, want %s", res.After, TracefsMountPoint)
	}
}

// TestEnsureTracefsUnprivileged mounts tracefs from a user namespace, where
// root lacks CAP_SYS_ADMIN over the kernel (tracefs cannot be mounted
// from a user namespace, as in a rootless container): the error names the
// mount point, the cause and what is missing.
func TestEnsureTracefsUnprivileged(t *testing.T) {
	testutil.RequireRoot(t)
	res := runTracefsChild(t, childMountUnprivileged, &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
	})
	t.Logf("unprivileged: %s", res.Err)
	for _, want := range []string{"mount tracefs at ", "operation not permitted", "CAP_SYS_ADMIN"} {
		if !strings.Contains(res.Err, want) {
			t.Errorf("error %q does not say %q", res.Err, want)
		}
	}
}

// runTracefsChildMode is the child's side of the tests above; it writes a
// tracefsChildResult to stdout and returns the exit status.
func runTracefsChildMode(mode string) int {
	var res tracefsChildResult
	switch mode {
	case childWatchWithoutTracefs, childReportWithoutTracefs:
		if err := unmountTracefs(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		before, err := currentTracefs()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		res.Before = before
		_, err = os.Stat(filepath.Join(TracefsMountPoint, "events"))
		res.BeforeEvents = err == nil
	}
	switch mode {
	case childWatchWithoutTracefs:
		w, err := WatchOOM(OOMOptions{Hooks: []OOMHook{OOMHookTracepoint}})
		if err != nil {
			res.Err = err.Error()
		} else {
			res.Hook = w.Hook()
			if err := w.Close(); err != nil {
				res.Err = err.Error()
			}
		}
	case childReportWithoutTracefs:
		res.Findings = map[string]capability.Finding{}
		h := kernel.DefaultHost()
		for _, r := range Requirements() {
			if r.ID == "ebpf.tracefs-oom-mark-victim" || r.ID == "ebpf.oom-watcher" {
				res.Findings[r.ID] = r.Probe(context.Background(), h)
			}
		}
	case childMountUnprivileged:
		dir, err := os.MkdirTemp("", "nodeshim-tracefs-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		table := filepath.Join(dir, "mountinfo")
		if err := os.WriteFile(table, []byte("1 0 0:1 / / rw - ext4 /dev/root rw\n"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if _, _, err := ensureTracefsAt(table, dir); err != nil {
			res.Err = err.Error()
		} else {
			fmt.Fprintln(os.Stderr, "mounted tracefs without privilege")
			unix.Unmount(dir, unix.MNT_DETACH)
			return 1
		}
	default:
		fmt.Fprintln(os.Stderr, "unknown tracefs child mode", mode)
		return 2
	}
	after, err := currentTracefs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	res.After = after
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// unmountTracefs detaches every tracefs and debugfs mount (tracefs is
// automounted under debugfs) in the child's private mount namespace,
// deepest first, until the mount table shows none.
func unmountTracefs() error {
	for range 8 {
		data, err := os.ReadFile(selfMountInfo)
		if err != nil {
			return err
		}
		entries, err := mountinfo.Parse(data)
		if err != nil {
			return err
		}
		var points []string
		for _, e := range entries {
			if e.FSType == "tracefs" || e.FSType == "debugfs" {
				points = append(points, e.Point)
			}
		}
		if len(points) == 0 {
			return nil
		}
		sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
		for _, p := range points {
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
				return fmt.Errorf("unmount %s: %w", p, err)
			}
		}
	}
	return fmt.Errorf("tracefs or debugfs still mounted after 8 rounds of unmounting")
}

// currentTracefs is findTracefs on the child's mount table.
func currentTracefs() (string, error) {
	data, err := os.ReadFile(selfMountInfo)
	if err != nil {
		return "", err
	}
	entries, err := mountinfo.Parse(data)
	if err != nil {
		return "", err
	}
	return findTracefs(entries), nil
}

// TestTracefsProbeOnAnotherRoot: a report on another root (--sys-root)
// reads and never mounts; where that root's kernel lists tracefs, the
// evidence says that serve mounts it.
func TestTracefsProbeOnAnotherRoot(t *testing.T) {
	for _, tc := range []struct {
		name, filesystems, want string
	}{
		{"kernel with tracefs", "nodev\tsysfs\nnodev\ttracefs\n", "the kernel has tracefs"},
		{"kernel without tracefs", "nodev\tsysfs\n", "is not mounted at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &kernel.Host{ProcRoot: t.TempDir(), SysRoot: t.TempDir()}
			if err := os.WriteFile(filepath.Join(h.ProcRoot, "filesystems"), []byte(tc.filesystems), 0o644); err != nil {
				t.Fatal(err)
			}
			ensure := func() (tracefsMount, error) {
				t.Fatal("the probe tried to mount on another root")
				return tracefsMount{}, nil
			}
			f := probeTracefsEvent("oom", "mark_victim", ensure)(context.Background(), h)
			if f.Verdict != capability.Unknown || !strings.Contains(f.Evidence, tc.want) {
				t.Errorf("%s (%s), want Unknown saying %q", f.Verdict, f.Evidence, tc.want)
			}
			if tc.name == "kernel without tracefs" && strings.Contains(f.Evidence, "the kernel has") {
				t.Errorf("evidence %q claims tracefs", f.Evidence)
			}
		})
	}
}
