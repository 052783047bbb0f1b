package seccomp

import (
	"context"
	"strings"
	"syscall"
	"testing"

	"github.com/nodeshim/nodeshim/internal/testutil"
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

// TestVerifyIA32 covers the x86 part of a filter: verified through
// int $0x80 where the ia32 entry works, reported as not verified where it
// does not (on this machine's hypervisor int $0x80 raises SIGSEGV).
func TestVerifyIA32(t *testing.T) {
	testutil.RequireRoot(t)
	p, f := loadTestdata(t, "runtime-default.json", CompileOptions{})
	ok, reason := ia32Available(context.Background())
	t.Logf("ia32 available: %v %s", ok, reason)
	rep, err := Verify(context.Background(), p, f, VerifyOptions{Sample: -1})
	if err != nil {
		t.Fatal(err)
	}
	x86 := 0
	for _, r := range rep.Results {
		if r.Arch != "x86" {
			continue
		}
		x86++
		if r.Status == StatusMismatch {
			t.Errorf("x86 %s%v: expected %s, observed %s", r.Syscall, r.Args, r.Expected, r.Observed)
		}
		if !ok && (r.Syscall != "*" || r.Status != StatusNotProbed || !strings.Contains(r.Detail, "int $0x80")) {
			t.Errorf("ia32 unavailable but got %+v", r)
		}
	}
	if ok && x86 < 300 {
		t.Errorf("only %d x86 probes", x86)
	}
	if !ok && (x86 != 1 || !strings.Contains(reason, "segmentation fault")) {
		t.Errorf("%d x86 results, reason %q", x86, reason)
	}
}
