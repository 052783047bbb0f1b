package seccomp

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// loadTestdata parses and compiles testdata/name.
func loadTestdata(t testing.TB, name string, co CompileOptions) (*Profile, *Filter) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(b, ParseOptions{Kernel: runningKernel(t)})
	if err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	f, err := Compile(p, co)
	if err != nil {
		t.Fatalf("compile %s: %v", name, err)
	}
	return p, f
}

// TestVerifyTestdata is the ground truth check on every valid profile in
// testdata, with both optimizers.
func TestVerifyTestdata(t *testing.T) {
	testutil.RequireRoot(t)
	files, err := filepath.Glob("testdata/*.json")
	if err != nil || len(files) < 7 {
		t.Fatalf("testdata profiles: %v %v", files, err)
	}
	for _, path := range files {
		for _, opt := range []Optimize{OptimizeLinear, OptimizeTree} {
			name := filepath.Base(path)
			t.Run(name+"/"+opt.String(), func(t *testing.T) {
				p, f := loadTestdata(t, name, CompileOptions{Optimize: opt})
				rep, err := Verify(context.Background(), p, f, VerifyOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rep.Results {
					if r.Status == StatusMismatch {
						t.Errorf("%s(%v) [%s]: expected %s (%s), observed %s, baseline %s: %s", r.Syscall, r.Args, r.Why, r.Expected, r.Rule, r.Observed, r.Baseline, r.Detail)
					}
				}
				t.Logf("%d probed in %d children: %d ok, %d inconclusive, %d not probed", rep.Probed, rep.Children, rep.OK, rep.Inconclusive, rep.NotProbed)
				if rep.OK == 0 || rep.Probed < len(p.Names())/2 {
					t.Errorf("too little was proven: %+v", rep)
				}
			})
		}
	}
}

// TestProbesStartAfresh: a probe never sees what an earlier probe changed
// in its process (persona, uid, umask), with or without a filter, through
// either syscall entry.
func TestProbesStartAfresh(t *testing.T) {
	testutil.RequireRoot(t)
	persona, _, errno := unix.Syscall(unix.SYS_PERSONALITY, 0xffffffff, 0, 0)
	if errno != 0 {
		t.Fatal(errno)
	}
	minus1 := baseArgs("")
	query := [6]uint64{0xffffffff}
	tests := []struct {
		name string
		recs []probeRecord
		// want is the result of the last record.
		want int64
	}{
		{"persona", []probeRecord{{Nr: unix.SYS_PERSONALITY, Args: [6]uint64{0xfffffffe}}, {Nr: unix.SYS_PERSONALITY, Args: query}}, int64(persona)},
		{"uid", []probeRecord{{Nr: unix.SYS_SETUID, Args: [6]uint64{65534}}, {Nr: unix.SYS_GETUID, Args: minus1}}, 0},
		{"umask", []probeRecord{{Nr: unix.SYS_UMASK, Args: [6]uint64{0o777}}, {Nr: unix.SYS_UMASK, Args: [6]uint64{0o022}}}, -1},
	}
	// A filter that allows these calls: a child under a filter starts afresh
	// too.
	_, f := loadTestdata(t, "deny-mkdir.json", CompileOptions{})
	for _, tc := range tests {
		for _, filter := range []*Filter{nil, f} {
			t.Run(fmt.Sprintf("%s/filtered=%v", tc.name, filter != nil), func(t *testing.T) {
				recs := append([]probeRecord(nil), tc.recs...)
				if _, err := runProbes(context.Background(), filter, recs); err != nil {
					t.Fatal(err)
				}
				first, last := recs[0], recs[len(recs)-1]
				if first.State != 2 || last.State != 2 || first.Errno != 0 || last.Errno != 0 {
					t.Fatalf("first %s, last %s", observed(first), observed(last))
				}
				want := tc.want
				if want < 0 {
					// umask returns the mask before it: the first call's
					// answer again, not the 0777 the first call set.
					want = first.Ret
				}
				if last.Ret != want {
					t.Errorf("last record returned %#x, want %#x: it saw the first record's change", last.Ret, want)
				}
			})
		}
	}
	t.Run("persona/ia32", func(t *testing.T) {
		if ok, reason := ia32Available(context.Background()); !ok {
			testutil.Skip(t, "%s", reason)
		}
		recs := []probeRecord{{Nr: unix.SYS_PERSONALITY, Args: [6]uint64{0xfffffffe}}, {Nr: 136 /* personality on i386 */, Args: query, I386: true}}
		if _, err := runProbes(context.Background(), nil, recs); err != nil {
			t.Fatal(err)
		}
		if recs[1].State != 2 || recs[1].Errno != 0 || recs[1].Ret != int64(int32(persona)) {
			t.Errorf("ia32 personality query after personality(0xfffffffe): %s, ret %#x, want persona %#x", observed(recs[1]), recs[1].Ret, persona)
		}
	})
}

// TestVerifyStatefulProbes: the unfiltered baseline runs a call that the
// filter denies and that changes the process (a persona, a uid); the probes
// after it must not be judged by that change.
func TestVerifyStatefulProbes(t *testing.T) {
	testutil.RequireRoot(t)
	p, f := loadTestdata(t, "stateful-probes.json", CompileOptions{})
	rep, err := Verify(context.Background(), p, f, VerifyOptions{Sample: -1})
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]Result{}
	for _, r := range rep.Results {
		if r.Status == StatusMismatch {
			t.Errorf("%s %s%v: expected %s, observed %s, baseline %s: %s", r.Arch, r.Syscall, r.Args, r.Expected, r.Observed, r.Baseline, r.Detail)
		}
		if len(r.Args) > 0 {
			byKey[r.Arch+" "+r.Syscall+" "+r.Args[0]] = r
		}
	}
	check := func(t *testing.T, key, observed, baseline string) {
		t.Helper()
		r, ok := byKey[key]
		if !ok {
			t.Fatalf("no probe %q", key)
		}
		if r.Status != StatusOK || r.Observed != observed || r.Baseline != baseline {
			t.Errorf("%s: %s, observed %s (want %s), baseline %s (want %s)", key, r.Status, r.Observed, observed, r.Baseline, baseline)
		}
	}
	native, err := nativeArch()
	if err != nil {
		t.Fatal(err)
	}
	// Unfiltered, setuid(65535) succeeds as root: it never runs after the
	// baseline's setuid(65534).
	check(t, native.String()+" setuid 0xffff", "success", "success")
	check(t, native.String()+" setuid 0xfffe", "errno 13 (permission denied)", "success")
	t.Run("ia32", func(t *testing.T) {
		if native != libseccomp.ArchAMD64 {
			testutil.Skip(t, "the ia32 entry is an x86_64 feature, this is %s", native)
		}
		for _, r := range rep.Results {
			if r.Arch == "x86" && r.Status == StatusNotProbed {
				testutil.Skip(t, "%s", r.Detail)
			}
		}
		// The query answers the fresh persona, not the baseline's
		// 0xfffffffe that the ia32 entry would read as -2.
		check(t, "x86 personality 0xffffffff", "success", "success")
		check(t, "x86 personality 0xfffffffe", "errno 1 (operation not permitted)", "success")
	})
}

// TestBaselineDiffersByTheFilterAlone: the unfiltered baseline runs with
// no_new_privs like the filtered probe, so that only the filter can change
// an answer.
func TestBaselineDiffersByTheFilterAlone(t *testing.T) {
	testutil.RequireRoot(t)
	_, f := loadTestdata(t, "deny-mkdir.json", CompileOptions{})
	for _, filter := range []*Filter{nil, f} {
		recs := []probeRecord{{Nr: unix.SYS_PRCTL, Args: [6]uint64{unix.PR_GET_NO_NEW_PRIVS}}}
		if _, err := runProbes(context.Background(), filter, recs); err != nil {
			t.Fatal(err)
		}
		if recs[0].State != 2 || recs[0].Errno != 0 || recs[0].Ret != 1 {
			t.Errorf("filtered=%v: PR_GET_NO_NEW_PRIVS %s, ret %d, want 1", filter != nil, observed(recs[0]), recs[0].Ret)
		}
	}
}
