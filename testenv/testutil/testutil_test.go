package testutil

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSkipBecomesFailure runs this test binary again as a child with and
// without NODESHIM_REQUIRE_PRIVILEGED=1 and checks how a gated test ends.
func TestSkipBecomesFailure(t *testing.T) {
	if os.Getenv("TESTUTIL_CHILD") == "1" {
		Skip(t, "feature %s absent", "widget")
		return
	}
	cases := []struct {
		name     string
		env      string
		wantFail bool
		wantOut  string
	}{
		{"local run skips", "0", false, "--- SKIP: TestSkipBecomesFailure"},
		{"CI run fails", "1", true, "NODESHIM_REQUIRE_PRIVILEGED=1 but the test cannot run: feature widget absent"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestSkipBecomesFailure$", "-test.v")
			cmd.Env = append(os.Environ(), "TESTUTIL_CHILD=1", EnvRequirePrivileged+"="+tc.env)
			out, err := cmd.CombinedOutput()
			if failed := err != nil; failed != tc.wantFail {
				t.Fatalf("child failed=%v, want %v; output:\n%s", failed, tc.wantFail, out)
			}
			if !strings.Contains(string(out), tc.wantOut) {
				t.Fatalf("child output lacks %q:\n%s", tc.wantOut, out)
			}
		})
	}
}

func TestSkipIfNotSupportedPassesNil(t *testing.T) {
	SkipIfNotSupported(t, nil) // must neither skip nor fail
	if t.Skipped() || t.Failed() {
		t.Fatal("nil error changed the test's state")
	}
}

func TestNotSupportedIsWrapped(t *testing.T) {
	if os.Getenv("TESTUTIL_CHILD") == "1" {
		SkipIfNotSupported(t, fmt.Errorf("probe ringbuf: %w", ErrNotSupported))
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNotSupportedIsWrapped$", "-test.v")
	cmd.Env = append(os.Environ(), "TESTUTIL_CHILD=1", EnvRequirePrivileged+"=0")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- SKIP") || !strings.Contains(string(out), "probe ringbuf: not supported") {
		t.Fatalf("wrapped ErrNotSupported did not skip with its reason (err %v):\n%s", err, out)
	}
}

func TestSkipIfGuestLacks(t *testing.T) {
	if os.Getenv("TESTUTIL_CHILD") == "1" {
		SkipIfGuestLacks(t, "kube-apiserver")
		return
	}
	cases := []struct {
		name    string
		env     []string
		wantOut string
	}{
		{"guest lacks the peer", []string{EnvGuest + "=6.12", EnvGuestLacks + "=go kube-apiserver etcd"},
			"--- SKIP: TestSkipIfGuestLacks", // even under NODESHIM_REQUIRE_PRIVILEGED=1
		},
		{"guest has the peer", []string{EnvGuest + "=6.12", EnvGuestLacks + "=go kube-apiserver-1"}, "--- PASS: TestSkipIfGuestLacks"},
		{"host", []string{EnvGuest + "=", EnvGuestLacks + "=kube-apiserver"}, "--- PASS: TestSkipIfGuestLacks"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestSkipIfGuestLacks$", "-test.v")
			cmd.Env = append(append(os.Environ(), "TESTUTIL_CHILD=1", EnvRequirePrivileged+"=1"), tc.env...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child failed: %v; output:\n%s", err, out)
			}
			if !strings.Contains(string(out), tc.wantOut) {
				t.Fatalf("child output lacks %q:\n%s", tc.wantOut, out)
			}
			if strings.Contains(tc.wantOut, "SKIP") && !strings.Contains(string(out), "has no kube-apiserver") {
				t.Fatalf("the skip does not name the missing peer:\n%s", out)
			}
		})
	}
}

// TestInstallAsImage: the copy is executable, has the same bytes, and a
// second copy into the same directory fails rather than overwriting.
func TestInstallAsImage(t *testing.T) {
	src := filepath.Join(t.TempDir(), "prog")
	want := bytes.Repeat([]byte("nodeshim"), 300_000) // larger than one buffer
	if err := os.WriteFile(src, want, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "image")
	got := InstallAsImage(t, src, dir)
	if got != filepath.Join(dir, "prog") {
		t.Errorf("copy at %s, want %s", got, filepath.Join(dir, "prog"))
	}
	b, err := os.ReadFile(got)
	if err != nil || !bytes.Equal(b, want) {
		t.Errorf("copy has %d bytes (err %v), want the %d of the source", len(b), err, len(want))
	}
	if st, err := os.Stat(got); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("copy mode %v (err %v), want 0755", st.Mode(), err)
	}
	fake := &recordingTB{TB: t}
	func() {
		defer func() { _ = recover() }()
		InstallAsImage(fake, src, dir)
	}()
	if !fake.fatal {
		t.Error("a second copy over the first did not fail")
	}
}

// recordingTB is a testing.TB whose Fatal and Fatalf record the failure and
// panic (to stop the caller) instead of failing the test.
type recordingTB struct {
	testing.TB
	fatal bool
}

func (r *recordingTB) Fatal(args ...any) {
	r.fatal = true
	panic(fmt.Sprint(args...))
}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.fatal = true
	panic(fmt.Sprintf(format, args...))
}
