package seccomp

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestComplain(t *testing.T) {
	tests := []struct {
		name    string
		profile string
		wantDef Action
		// want is each rule's action and names after Complain.
		want []string
	}{
		{name: "denying default and rules", profile: `{"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":1,"syscalls":[
			{"names":["read","write"],"action":"SCMP_ACT_ALLOW"},{"names":["ptrace"],"action":"SCMP_ACT_KILL_PROCESS"},
			{"names":["mkdir"],"action":"SCMP_ACT_ERRNO","errnoRet":13},{"names":["uname"],"action":"SCMP_ACT_TRAP"}]}`,
			wantDef: ActLog, want: []string{"SCMP_ACT_ALLOW read,write"}},
		{name: "allowing default", profile: `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[
			{"names":["mkdir"],"action":"SCMP_ACT_ERRNO","errnoRet":13},{"names":["uname"],"action":"SCMP_ACT_LOG"},
			{"names":["personality"],"action":"SCMP_ACT_ERRNO","args":[{"index":0,"value":8,"op":"SCMP_CMP_NE"}]}]}`,
			wantDef: ActAllow, want: []string{"SCMP_ACT_LOG mkdir", "SCMP_ACT_LOG uname", "SCMP_ACT_LOG personality"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.profile), ParseOptions{})
			if err != nil {
				t.Fatal(err)
			}
			before := len(p.Syscalls)
			c := Complain(p)
			if len(p.Syscalls) != before || p.DefaultAction == ActLog && tc.wantDef == ActLog {
				t.Fatal("Complain changed its input")
			}
			if c.DefaultAction != tc.wantDef || (c.DefaultAction == ActLog && c.DefaultErrnoRet != nil) {
				t.Errorf("default %s/%v, want %s", c.DefaultAction, c.DefaultErrnoRet, tc.wantDef)
			}
			var got []string
			for _, s := range c.Syscalls {
				if s.ErrnoRet != nil {
					t.Errorf("%v keeps errnoRet %d", s.Names, *s.ErrnoRet)
				}
				got = append(got, string(s.Action)+" "+strings.Join(s.Names, ","))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("rules %q, want %q", got, tc.want)
			}
			// Nothing is denied any more.
			for _, n := range []string{"read", "ptrace", "mkdir", "uname", "personality", "getpid"} {
				if v := c.Evaluate(n, [6]uint64{}).Verdict; !v.Action.Permits() {
					t.Errorf("%s: %s in complain mode", n, v)
				}
			}
		})
	}
}

func TestEnsureActionLogged(t *testing.T) {
	write := func(t *testing.T, content string) string {
		root := t.TempDir()
		p := filepath.Join(root, ActionsLoggedFile)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return root
	}
	t.Run("added", func(t *testing.T) {
		root := write(t, "kill_process kill_thread trap errno user_notif trace\n")
		before, changed, err := EnsureActionLogged(root, "log")
		if err != nil || !changed || len(before) != 6 {
			t.Fatalf("before %v changed %v err %v", before, changed, err)
		}
		got, _ := os.ReadFile(filepath.Join(root, ActionsLoggedFile))
		if string(got) != "kill_process kill_thread trap errno user_notif trace log" {
			t.Errorf("wrote %q", got)
		}
	})
	t.Run("already there", func(t *testing.T) {
		root := write(t, "errno log\n")
		if _, changed, err := EnsureActionLogged(root, "log"); err != nil || changed {
			t.Fatalf("changed %v err %v", changed, err)
		}
	})
	t.Run("no sysctl", func(t *testing.T) {
		if _, _, err := EnsureActionLogged(t.TempDir(), "log"); !errors.Is(err, ErrActionsLogged) {
			t.Fatalf("err = %v, want ErrActionsLogged", err)
		}
	})
}
