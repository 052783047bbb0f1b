package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// buildWorkload compiles testdata/record/workload.c, a C program that does
// file, network and process work and prints one line per step.
func buildWorkload(t *testing.T) string {
	t.Helper()
	gcc := testutil.RequireBinary(t, "gcc")
	bin := filepath.Join(t.TempDir(), "workload")
	out, err := exec.Command(gcc, "-O2", "-Wall", "-o", bin, filepath.Join("testdata", "record", "workload.c")).CombinedOutput()
	if err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

// recordTable returns the table of syscalls that record writes to stderr
// after its logs.
func recordTable(t *testing.T, stderr string) string {
	t.Helper()
	i := strings.Index(stderr, "SYSCALL ")
	if i < 0 {
		t.Fatalf("no syscall table on stderr:\n%s", stderr)
	}
	return stderr[i:]
}

// profileNames returns the names that the profile's single rule allows.
func profileNames(t *testing.T, path string) (map[string]any, []string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]any
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	rules := p["syscalls"].([]any)
	if len(rules) != 1 {
		t.Fatalf("%d rules, want 1", len(rules))
	}
	var names []string
	for _, n := range rules[0].(map[string]any)["names"].([]any) {
		names = append(names, n.(string))
	}
	return p, names
}

// TestSeccompRecordRoundTrip records the workload, runs it again under the
// recorded profile with `seccomp exec` and expects the same output; then it
// drops socket(2) from the profile and expects EPERM on exactly that call.
func TestSeccompRecordRoundTrip(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/sys/kernel/btf/vmlinux")
	workload := buildWorkload(t)
	dir := t.TempDir()
	work := func(name string) string {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		return d
	}

	unconfined, err := exec.Command(workload, work("plain")).Output()
	if err != nil {
		t.Fatalf("workload unconfined: %v", err)
	}

	profile := filepath.Join(dir, "profile.json")
	stdout, stderr, code := runMain(t, "seccomp", "record", "--out-file", profile, "--", workload, work("record"))
	if code != 0 {
		t.Fatalf("record: exit %d\n%s", code, stderr)
	}
	table := recordTable(t, stderr)
	if stdout != string(unconfined) {
		t.Errorf("output while recorded differs:\n%s\nwant\n%s", stdout, unconfined)
	}
	p, names := profileNames(t, profile)
	if p["defaultAction"] != "SCMP_ACT_ERRNO" || !slices.IsSorted(names) {
		t.Errorf("profile: defaultAction %v, names sorted %v", p["defaultAction"], slices.IsSorted(names))
	}
	for _, want := range []string{"execve", "openat", "write", "rename", "socket", "bind", "listen", "connect", "accept", "sendto", "recvfrom", "wait4", "pipe2", "exit_group"} {
		if !slices.Contains(names, want) {
			t.Errorf("profile lacks %s: %v", want, names)
		}
		if !strings.Contains(table, "\n"+want+" ") {
			t.Errorf("table lacks %s:\n%s", want, table)
		}
	}
	// fork(3) is clone(2) or clone3(2) in glibc.
	if !slices.Contains(names, "clone") && !slices.Contains(names, "clone3") {
		t.Errorf("profile lacks clone and clone3: %v", names)
	}

	// The same workload, recorded again, gives the same profile.
	profile2 := filepath.Join(dir, "profile2.json")
	if _, stderr, code := runMain(t, "seccomp", "record", "--out-file", profile2, "--", workload, work("record2")); code != 0 {
		t.Fatalf("second record: exit %d\n%s", code, stderr)
	}
	a, _ := os.ReadFile(profile)
	b, _ := os.ReadFile(profile2)
	if !bytes.Equal(a, b) {
		t.Errorf("two recordings of the same workload differ:\n%s\n%s", a, b)
	}

	stdout, stderr, code = runMain(t, "seccomp", "exec", "--profile", profile, "--", workload, work("confined"))
	if code != 0 || stdout != string(unconfined) {
		t.Fatalf("under the recorded profile: exit %d, output:\n%s\nwant\n%s\nstderr: %s", code, stdout, unconfined, stderr)
	}

	// Without socket(2) the workload must fail on socket and nothing else.
	names = slices.DeleteFunc(names, func(n string) bool { return n == "socket" })
	p["syscalls"].([]any)[0].(map[string]any)["names"] = names
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	noSocket := filepath.Join(dir, "no-socket.json")
	if err := os.WriteFile(noSocket, data, 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, _, code = runMain(t, "seccomp", "exec", "--profile", noSocket, "--", workload, work("no-socket"))
	if code != 1 {
		t.Errorf("without socket: exit %d, want 1 (one failed step):\n%s", code, stdout)
	}
	var want []string
	for _, l := range strings.SplitAfter(string(unconfined), "\n") {
		switch {
		case l == "socket: ok\n":
			want = append(want, "socket: errno 1 (Operation not permitted)\n")
		case slices.Contains([]string{"bind", "listen", "getsockname", "socket-client", "connect", "accept", "send", "recv", "received"}, strings.SplitN(l, ":", 2)[0]):
			// the network steps after socket do not run
		default:
			want = append(want, l)
		}
	}
	if stdout != strings.Join(want, "") {
		t.Errorf("without socket the output is:\n%s\nwant\n%s", stdout, strings.Join(want, ""))
	}
}

func TestSeccompRecordUsage(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "p.json")
	cases := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no output", []string{"seccomp", "record", "--", "true"}, 2, "--out-file PROFILE is required"},
		{"no workload", []string{"seccomp", "record", "--out-file", out}, 2, "exactly one of"},
		{"two workloads", []string{"seccomp", "record", "--out-file", out, "--pid", "1", "--", "true"}, 2, "exactly one of"},
		{"duration with a command", []string{"seccomp", "record", "--out-file", out, "--duration", "1s", "--", "true"}, 2, "--duration applies"},
		{"two workloads, one a container", []string{"seccomp", "record", "--out-file", out, "--container-id", "x", "--pid", "1"}, 2, "exactly one of"},
		{"pod without container", []string{"seccomp", "record", "--out-file", out, "--pod", "web-0"}, 2, "--pod needs --container"},
		{"unknown container id", []string{"seccomp", "record", "--out-file", out, "--container-id", "nosuch", "--runtime-root", dir}, 1, "runc state nosuch"},
		{"bad base", []string{"seccomp", "record", "--out-file", out, "--base", filepath.Join(dir, "missing.json"), "--", "true"}, 1, "read base profile"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := runMain(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("exit %d (want %d), stderr %q (want %q)", code, tc.code, stderr, tc.stderr)
			}
			if _, err := os.Stat(out); err == nil {
				t.Error("a profile was written")
			}
		})
	}
}

// TestSeccompRecordWithBase records a command on top of a base profile and
// expects base's rules first, in order, then one rule with what base did
// not already settle; a recorded syscall that base kills stays killed.
func TestSeccompRecordWithBase(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/sys/kernel/btf/vmlinux")
	dir := t.TempDir()
	base := filepath.Join(dir, "base.json")
	if err := os.WriteFile(base, []byte(`{"defaultAction":"SCMP_ACT_ERRNO","architectures":["SCMP_ARCH_X86"],
"syscalls":[{"names":["write","close"],"action":"SCMP_ACT_ALLOW"},{"names":["execve"],"action":"SCMP_ACT_LOG"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	profile := filepath.Join(dir, "p.json")
	_, stderr, code := runMain(t, "seccomp", "record", "--out-file", profile, "--base", base, "--", "true")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "the base rule is kept") || !strings.Contains(stderr, "execve") {
		t.Errorf("no warning about execve, which base settles with SCMP_ACT_LOG: %s", stderr)
	}
	data, err := os.ReadFile(profile)
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Architectures []string
		Syscalls      []struct {
			Names  []string
			Action string
		}
	}
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Architectures, []string{"SCMP_ARCH_X86", "SCMP_ARCH_X86_64"}) || len(p.Syscalls) != 3 {
		t.Fatalf("merged profile:\n%s", data)
	}
	if p.Syscalls[0].Action != "SCMP_ACT_ALLOW" || p.Syscalls[1].Action != "SCMP_ACT_LOG" || p.Syscalls[2].Action != "SCMP_ACT_ALLOW" {
		t.Errorf("rule order or actions changed:\n%s", data)
	}
	added := p.Syscalls[2].Names
	for _, n := range []string{"write", "close", "execve"} {
		if slices.Contains(added, n) {
			t.Errorf("%s added again although base settles it: %v", n, added)
		}
	}
	if !slices.Contains(added, "exit_group") || !slices.IsSorted(added) {
		t.Errorf("recorded rule: %v", added)
	}
}

// TestSeccompRecordStdoutIsTheCommands records `ls -la DIR > out` as an
// operator would and expects out to hold what ls printed and nothing of
// the recorder: its table goes to stderr.
func TestSeccompRecordStdoutIsTheCommands(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/sys/kernel/btf/vmlinux")
	ls := testutil.RequireBinary(t, "ls")
	// Both directories exist before the first ls: the link count of ..
	// is in its output.
	dir, profile := t.TempDir(), filepath.Join(t.TempDir(), "p.json")
	for _, name := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := exec.Command(ls, "-la", dir).Output()
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runMain(t, "seccomp", "record", "--out-file", profile, "--", ls, "-la", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if stdout != string(want) {
		t.Errorf("stdout of the recorded ls:\n%s\nwant\n%s", stdout, want)
	}
	if table := recordTable(t, stderr); !strings.Contains(table, "\nexecve ") {
		t.Errorf("table on stderr lacks execve:\n%s", table)
	}
}
