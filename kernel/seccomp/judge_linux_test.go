package seccomp

import (
	"context"
	"strings"
	"syscall"
	"testing"

	libseccomp "github.com/seccomp/libseccomp-golang"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

func TestJudge(t *testing.T) {
	done := func(errno int32) probeRecord { return probeRecord{State: 2, Errno: errno} }
	died := func(s syscall.Signal) probeRecord { return probeRecord{State: 1, Signal: s} }
	allow := Outcome{Verdict: Verdict{Action: ActAllow}}
	eacces := Outcome{Verdict: Verdict{Action: ActErrno, Errno: 13}}
	kill := Outcome{Verdict: Verdict{Action: ActKillProcess}}
	trap := Outcome{Verdict: Verdict{Action: ActTrap}}
	trace := Outcome{Verdict: Verdict{Action: ActTrace, Errno: 3}}
	either := Outcome{Verdict: Verdict{Action: ActAllow}, Candidates: []Verdict{{Action: ActAllow}, {Action: ActErrno, Errno: 1}}}
	tests := []struct {
		name string
		exp  Outcome
		r, b probeRecord
		want Status
	}{
		{"allowed, same answer", allow, done(14), done(14), StatusOK},
		{"allowed, different answer", allow, done(1), done(14), StatusMismatch},
		{"errno as profiled", eacces, done(13), done(14), StatusOK},
		{"errno, also unfiltered", eacces, done(13), done(13), StatusInconclusive},
		{"errno wrong", eacces, done(1), done(14), StatusMismatch},
		{"errno but ran", eacces, done(14), done(14), StatusMismatch},
		{"kill", kill, died(syscall.SIGSYS), done(0), StatusOK},
		{"kill missing", kill, done(0), done(0), StatusMismatch},
		{"trap", trap, probeRecord{State: 2, Trapped: true}, done(0), StatusOK},
		{"trap missing", trap, died(syscall.SIGSYS), done(0), StatusMismatch},
		{"trace without tracer", trace, done(38), done(22), StatusOK},
		{"ambiguous, one candidate", either, done(1), done(14), StatusOK},
		{"baseline crashes, allowed", allow, died(syscall.SIGSEGV), died(syscall.SIGSEGV), StatusInconclusive},
		{"baseline crashes, kill proven", kill, died(syscall.SIGSYS), died(syscall.SIGSEGV), StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got, detail := judge(tc.exp, tc.r, tc.b); got != tc.want {
				t.Errorf("got %s (%s), want %s", got, detail, tc.want)
			}
		})
	}
}

// TestVerifyIA32 covers the x86 part of a filter through int $0x80. Where
// the ia32 entry does not work (a kernel without IA32_EMULATION, booted
// with ia32_emulation=0, or a hypervisor that faults the vector) the report
// must say the x86 part is not verified, and the test is skipped through
// the privileged-test gate: it cannot prove anything about the x86 part.
func TestVerifyIA32(t *testing.T) {
	testutil.RequireRoot(t)
	native, err := nativeArch()
	if err != nil {
		t.Fatal(err)
	}
	if native != libseccomp.ArchAMD64 {
		testutil.Skip(t, "the ia32 entry is an x86_64 feature, this is %s", native)
	}
	p, f := loadTestdata(t, "runtime-default.json", CompileOptions{})
	ok, reason := ia32Available(context.Background())
	t.Logf("ia32 available: %v %s", ok, reason)
	rep, err := Verify(context.Background(), p, f, VerifyOptions{Sample: -1})
	if err != nil {
		t.Fatal(err)
	}
	var x86 []Result
	for _, r := range rep.Results {
		if r.Arch == "x86" {
			x86 = append(x86, r)
		}
	}
	if !ok {
		if len(x86) != 1 || x86[0].Syscall != "*" || x86[0].Status != StatusNotProbed || x86[0].Detail != reason || !strings.Contains(reason, "int $0x80") {
			t.Fatalf("ia32 unavailable (%s) but the x86 results are %+v", reason, x86)
		}
		testutil.Skip(t, "the x86 part of the filter cannot be exercised here: %s", reason)
	}
	proven := 0
	for _, r := range x86 {
		switch r.Status {
		case StatusMismatch:
			t.Errorf("x86 %s%v: expected %s, observed %s, baseline %s: %s", r.Syscall, r.Args, r.Expected, r.Observed, r.Baseline, r.Detail)
		case StatusOK:
			proven++
		}
	}
	t.Logf("%d x86 results, %d proven", len(x86), proven)
	if len(x86) < 300 || proven < 300 {
		t.Errorf("%d x86 results, %d proven", len(x86), proven)
	}
}
