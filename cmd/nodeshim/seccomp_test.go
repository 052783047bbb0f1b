package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/kernel/seccomp"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

const seccompTestdata = "../../kernel/seccomp/testdata"

func TestSeccompCheck(t *testing.T) {
	out, err := run(t, "seccomp", "check", filepath.Join(seccompTestdata, "runtime-default.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"(oci shape): valid",
		"default action ERRNO(1); architectures amd64,x86,x32",
		"clone3",
		"ALLOW if arg0 & 0x7e020000 == 0x0; otherwise ERRNO(1)",
		"ALLOW if arg0 != 0x28; ERRNO(97) if arg0 == 0x28; otherwise ERRNO(1)",
		"default action ERRNO(1) covers: ",
		"ENOSYS prefix covers every syscall number above 456 on amd64",
		`warning: syscalls[0].names[354]: "mseal" is unknown to libseccomp`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	out, err = run(t, "seccomp", "check", filepath.Join(seccompTestdata, "deny-mkdir.json"), "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var ex seccomp.Explanation
	if err := json.Unmarshal([]byte(out), &ex); err != nil {
		t.Fatal(err)
	}
	if ex.ByRule != 2 || ex.ByDefault < 300 || ex.ByENOSYS != 0 || ex.Default != "ALLOW" {
		t.Errorf("%+v", ex)
	}
	for _, m := range ex.Syscalls {
		if m.Syscall == "mkdirat" && (m.Action != "ERRNO(13)" || m.Rules[0] != "syscalls[0]") {
			t.Errorf("mkdirat: %+v", m)
		}
	}
}

func TestSeccompCheckInvalid(t *testing.T) {
	tests := []struct {
		file string
		want string
	}{
		{"invalid/unknown-op.json", `syscalls[0].args[0].op: unknown comparison operator "SCMP_CMP_FOO"`},
		{"invalid/conflict.json", `syscalls[2].names[0]: conflicting rules`},
		{"no-such-file.json", "no such file or directory"},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			_, err := run(t, "seccomp", "check", filepath.Join(seccompTestdata, tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
			var ee *exitError
			if errors.As(err, &ee) {
				t.Errorf("exit code %d, want 1", ee.code)
			}
		})
	}
	if _, err := run(t, "seccomp", "check"); err == nil {
		t.Error("check without a profile")
	}
}

func TestSeccompCompile(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "filter.bpf")
	profile := filepath.Join(seccompTestdata, "deny-mkdir.json")
	text, err := run(t, "seccomp", "compile", profile, "--out-file", out, "--optimize", "linear", "--disasm")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := seccomp.DecodeProgram(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"libseccomp 2.5.4, linear", "default: ALLOW; rules: 2; syscalls: 2", "ret  ERRNO(13)", "wrote "} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if !strings.Contains(text, "instructions: "+itoa(len(prog))+" ") {
		t.Errorf("instruction count differs from the %d written:\n%s", len(prog), text)
	}
	// The file is never overwritten.
	if _, err := run(t, "seccomp", "compile", profile, "--out-file", out); err == nil || !errors.Is(err, os.ErrExist) {
		t.Errorf("second write: %v", err)
	}
	js, err := run(t, "seccomp", "compile", profile, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var sum compileSummary
	if err := json.Unmarshal([]byte(js), &sum); err != nil || sum.Filter.OptimizeName != "tree" || sum.Filter.Syscalls != 2 {
		t.Errorf("%v %+v", err, sum.Filter)
	}
	if _, err := run(t, "seccomp", "compile", profile, "--optimize", "quantum"); err == nil {
		t.Error("unknown optimization accepted")
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestSeccompVerify(t *testing.T) {
	testutil.RequireRoot(t)
	out, err := run(t, "seccomp", "verify", filepath.Join(seccompTestdata, "runtime-default.json"))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, " 0 mismatches") {
		t.Errorf("%s", out)
	}
	js, err := run(t, "seccomp", "verify", filepath.Join(seccompTestdata, "kill-process.json"), "-o", "json", "--sample", "-1")
	if err != nil {
		t.Fatal(err)
	}
	var rep seccomp.Report
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Probed != 3 || rep.OK != 3 || rep.Children != 3 {
		t.Errorf("%+v", rep)
	}
}

// TestSeccompHelperProcess is not a test: it runs nodeshim's main with the
// arguments in NODESHIM_TEST_MAIN_ARGS when started by runMain.
func TestSeccompHelperProcess(t *testing.T) {
	args := os.Getenv("NODESHIM_TEST_MAIN_ARGS")
	if args == "" {
		return
	}
	var argv []string
	if err := json.Unmarshal([]byte(args), &argv); err != nil {
		t.Fatal(err)
	}
	os.Args = append([]string{"nodeshim"}, argv...)
	main()
}

// runMain runs nodeshim in a child process (seccomp exec replaces the
// process it runs in) and returns its output and exit code.
func runMain(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSeccompHelperProcess$")
	js, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), "NODESHIM_TEST_MAIN_ARGS="+string(js))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

func TestSeccompExec(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	profile := func(name string) string { return filepath.Join(seccompTestdata, name) }
	// Profiles that deny what the exec child itself does under the filter:
	// one naming no syscall denies everything (it died of SIGSEGV, its
	// exit_group denied, instead of exiting 126).
	for name, data := range map[string]string{
		"no-syscall.json":      `{"defaultAction": "SCMP_ACT_ERRNO"}`,
		"kill-exit-group.json": `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["exit_group"], "action": "SCMP_ACT_KILL_PROCESS"}]}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
		ran    bool
	}{
		{"denied mkdir", []string{"seccomp", "exec", "--profile", profile("deny-mkdir.json"), "--", "mkdir", filepath.Join(dir, "d")}, 1, "", "Permission denied", false},
		{"exit status passes through", []string{"seccomp", "exec", "--profile", profile("runtime-default.json"), "--", "sh", "-c", "touch " + marker + "; exit 7"}, 7, "", "", true},
		{"seccomp mode in the command", []string{"seccomp", "exec", "--profile", profile("deny-mkdir.json"), "--", "grep", "^Seccomp:", "/proc/self/status"}, 0, "Seccomp:\t2\n", "", false},
		{"invalid profile runs nothing", []string{"seccomp", "exec", "--profile", profile("invalid/unknown-op.json"), "--", "touch", marker}, 1, "", "syscalls[0].args[0].op", false},
		{"missing command", []string{"seccomp", "exec", "--profile", profile("deny-mkdir.json"), "--", "no-such-command-nodeshim"}, 127, "", "executable file not found", false},
		{"missing profile flag", []string{"seccomp", "exec", "--", "true"}, 2, "", "--profile is required", false},
		{"profile naming no syscall refused", []string{"seccomp", "exec", "--profile", filepath.Join(dir, "no-syscall.json"), "--", "touch", marker}, 126, "",
			"the profile denies a syscall that seccomp exec makes under it: execve (errno 38", false},
		{"profile killing exit_group refused", []string{"seccomp", "exec", "--profile", filepath.Join(dir, "kill-exit-group.json"), "--", "touch", marker}, 126, "",
			"exit_group (killed by SIGSYS", false},
		{"notify refused", []string{"seccomp", "exec", "--profile", profile("trace-notify.json"), "--", "touch", marker}, 1, "", "SCMP_ACT_NOTIFY", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(marker)
			stdout, stderr, code := runMain(t, tc.args...)
			if code != tc.code || (tc.stdout != "" && stdout != tc.stdout) || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("exit %d (want %d), stdout %q (want %q), stderr %q (want %q)", code, tc.code, stdout, tc.stdout, stderr, tc.stderr)
			}
			if _, err := os.Stat(marker); (err == nil) != tc.ran {
				t.Errorf("command ran: %v, want %v", err == nil, tc.ran)
			}
		})
	}
}
