package seccomp

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestResolveBaseVerifies: the union of a profile and its base compiles
// and the kernel does what the union means, with base's rules
// (mkdir EACCES) and the profile's own (sethostname EROFS) both in force.
func TestResolveBaseVerifies(t *testing.T) {
	testutil.RequireRoot(t)
	own := []byte(`{"defaultAction":"SCMP_ACT_ALLOW","baseProfileName":"deny-mkdir.json",
		"syscalls":[{"names":["sethostname"],"action":"SCMP_ACT_ERRNO","errnoRet":30},{"names":["mkdirat"],"action":"SCMP_ACT_ERRNO","errnoRet":1}]}`)
	load := func(ref string) ([]byte, error) { return os.ReadFile(filepath.Join("testdata", ref)) }
	p, err := ResolveBase("own.json", own, ParseOptions{Kernel: runningKernel(t)}, load)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Verdict{
		"mkdir":       {Action: ActErrno, Errno: 13},
		"mkdirat":     {Action: ActErrno, Errno: 1},
		"sethostname": {Action: ActErrno, Errno: 30},
		"getpid":      {Action: ActAllow},
	}
	for name, v := range want {
		if got := p.Evaluate(name, [6]uint64{}).Verdict; got != v {
			t.Errorf("%s means %s, want %s", name, got, v)
		}
	}
	f, err := Compile(p, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(context.Background(), p, f, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		if r.Status == StatusMismatch {
			t.Errorf("%s: expected %s, observed %s", r.Syscall, r.Expected, r.Observed)
		}
	}
	if rep.OK < 3 {
		t.Errorf("too little proven: %+v", rep)
	}
}

// TestLoadFileBase: the commands' LoadFile stacks a profile on the base it
// names, relative to the profile's directory, and names the chain of a
// missing one.
func TestLoadFileBase(t *testing.T) {
	dir := t.TempDir()
	base, err := os.ReadFile(filepath.Join("testdata", "deny-mkdir.json"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("base.json", string(base))
	own := write("own.json", `{"defaultAction":"SCMP_ACT_ALLOW","baseProfileName":"base.json"}`)
	p, _, err := LoadFile(context.Background(), own, ParseOptions{}, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := p.Evaluate("mkdir", [6]uint64{}).Verdict; v != (Verdict{Action: ActErrno, Errno: 13}) {
		t.Errorf("mkdir: %s, want base's EACCES", v)
	}
	orphan := write("orphan.json", `{"defaultAction":"SCMP_ACT_ALLOW","baseProfileName":"gone.json"}`)
	if _, _, err := LoadFile(context.Background(), orphan, ParseOptions{}, CompileOptions{}); !errors.Is(err, ErrBaseMissing) || !strings.Contains(err.Error(), "orphan.json -> gone.json") {
		t.Errorf("err = %v, want ErrBaseMissing naming the chain", err)
	}
}

// TestComplainVerifies: a denying profile in complain mode compiles, and
// on the kernel every syscall it denied runs (the kernel's answer is the
// unfiltered one), as the complain-mode profile means.
func TestComplainVerifies(t *testing.T) {
	testutil.RequireRoot(t)
	p, _ := loadTestdata(t, "kill-process.json", CompileOptions{})
	c := Complain(p)
	f, err := Compile(c, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.ENOSYS) != 0 {
		t.Errorf("complain mode has an ENOSYS prefix: %+v", f.ENOSYS)
	}
	rep, err := Verify(context.Background(), c, f, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		if r.Status == StatusMismatch {
			t.Errorf("%s: expected %s, observed %s", r.Syscall, r.Expected, r.Observed)
		}
	}
	if rep.OK < 3 {
		t.Errorf("too little proven: %+v", rep)
	}
}
