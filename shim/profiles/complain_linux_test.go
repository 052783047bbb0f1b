package profiles

import (
	"errors"
	"testing"

	"github.com/nodeshim/nodeshim/kernel/seccomp"
)

// TestApplyComplain: a profile named in Complain is installed in complain
// mode (what it denies is logged, what it allows stays allowed), the
// others as they are; naming a profile that is not configured installs
// nothing.
func TestApplyComplain(t *testing.T) {
	e := newEnv(t)
	in := e.installer("kubelet")
	in.Complain = []string{"try.json"}
	if _, err := in.Apply(map[string]string{"try.json": deny, "enforce.json": deny}); err != nil {
		t.Fatal(err)
	}
	files := e.files("kubelet")
	if files["enforce.json"] != deny {
		t.Errorf("enforce.json installed as %s", files["enforce.json"])
	}
	p, err := seccomp.Parse([]byte(files["try.json"]), Node())
	if err != nil {
		t.Fatal(err)
	}
	if p.DefaultAction != seccomp.ActLog {
		t.Errorf("complain-mode default %s, want SCMP_ACT_LOG:\n%s", p.DefaultAction, files["try.json"])
	}
	if v := p.Evaluate("read", [6]uint64{}).Verdict; v.Action != seccomp.ActAllow {
		t.Errorf("read: %s, want still allowed", v)
	}

	in.Complain = []string{"absent.json"}
	_, err = in.Apply(map[string]string{"try.json": deny})
	var pe *ProfileError
	if !errors.As(err, &pe) || pe.Name != "absent.json" {
		t.Fatalf("err = %v, want a ProfileError naming absent.json", err)
	}
	if got := e.files("kubelet")["try.json"]; got != files["try.json"] {
		t.Errorf("a failed check changed try.json")
	}
}
