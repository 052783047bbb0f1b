package seccomp

import (
	"context"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestRequirements runs every seccomp probe on this kernel (6.18, with
// CONFIG_SECCOMP_FILTER) and libseccomp 2.5.4: all of them are Supported.
func TestRequirements(t *testing.T) {
	testutil.RequireRoot(t)
	reqs := Requirements()
	wantIDs := []string{
		"seccomp.filter",
		"seccomp.action.kill_process", "seccomp.action.kill_thread", "seccomp.action.trap", "seccomp.action.errno",
		"seccomp.action.trace", "seccomp.action.log", "seccomp.action.allow", "seccomp.action.user_notif",
		"seccomp.notify",
		"seccomp.flag.tsync", "seccomp.flag.log", "seccomp.flag.spec_allow", "seccomp.flag.wait_killable_recv",
		"seccomp.libseccomp",
	}
	var ids []string
	for _, r := range reqs {
		ids = append(ids, r.ID)
		if r.Group != "seccomp" || len(r.NeededBy) == 0 || r.Probe == nil {
			t.Errorf("%s: incomplete %+v", r.ID, r)
		}
	}
	if strings.Join(ids, " ") != strings.Join(wantIDs, " ") {
		t.Fatalf("ids %v", ids)
	}
	host := kernel.DefaultHost()
	for _, r := range reqs {
		t.Run(r.ID, func(t *testing.T) {
			f := r.Probe(context.Background(), host)
			t.Logf("%s: %s", f.Verdict, f.Evidence)
			if f.Verdict != capability.Supported || f.Evidence == "" {
				t.Errorf("%s: %+v", r.ID, f)
			}
			if !r.MinKernel.IsZero() && !runningKernel(t).AtLeast(r.MinKernel) {
				t.Errorf("%s needs %v but is supported on %v", r.ID, r.MinKernel, runningKernel(t))
			}
		})
	}
}

func TestActionAvailableRejectsUnknown(t *testing.T) {
	testutil.RequireRoot(t)
	// 0x7ff80000 is not a seccomp action.
	if err := ActionAvailable(0x7ff80000); err == nil {
		t.Error("unknown action reported available")
	}
	ok, err := FilterFlagAccepted(1 << 20)
	if err != nil || ok {
		t.Errorf("unknown flag: %v %v", ok, err)
	}
}
