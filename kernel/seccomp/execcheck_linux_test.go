package seccomp

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestCheckExec: the kernel decides whether a filter lets Exec's child
// through. A profile that names no syscall denies everything (EPERM below
// its highest syscall, ENOSYS above: execve and exit_group both), and so
// do profiles that deny, kill or trap one of the two; each is refused
// naming what the kernel answered. Profiles that allow both pass.
func TestCheckExec(t *testing.T) {
	testutil.RequireRoot(t)
	runtimeDefault, err := os.ReadFile("testdata/runtime-default.json")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, profile string
		want          []string // substrings of the error; none for a pass
	}{
		{"names no syscall", `{"defaultAction":"SCMP_ACT_ERRNO"}`,
			[]string{"execve (errno 38 (function not implemented) under the filter, errno 14 (bad address) without)", "exit_group (errno 38"}},
		{"names no syscall, no ENOSYS prefix below", `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["io_pgetevents"],"action":"SCMP_ACT_ALLOW"}]}`,
			[]string{"execve (errno 1 (operation not permitted)", "exit_group (errno 1"}},
		{"denies execve", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["execve"],"action":"SCMP_ACT_ERRNO","errnoRet":13}]}`,
			[]string{"execve (errno 13"}},
		{"kills on exit_group", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["exit_group"],"action":"SCMP_ACT_KILL_PROCESS"}]}`,
			[]string{"exit_group (killed by SIGSYS under the filter, exited with status 90 without)"}},
		{"traps execve", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["execve"],"action":"SCMP_ACT_TRAP"}]}`,
			[]string{"execve (trapped"}},
		{"allows everything", `{"defaultAction":"SCMP_ACT_ALLOW"}`, nil},
		{"logs everything", `{"defaultAction":"SCMP_ACT_LOG"}`, nil},
		{"runtime default", string(runtimeDefault), nil},
		{"strict, with the two", `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["execve","exit_group"],"action":"SCMP_ACT_ALLOW"}]}`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Compile(mustParse(t, tc.profile), CompileOptions{})
			if err != nil {
				t.Fatal(err)
			}
			err = CheckExec(context.Background(), f)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("CheckExec = %v", err)
				}
				return
			}
			if !errors.Is(err, ErrExecDenied) {
				t.Fatalf("CheckExec = %v, want %v", err, ErrExecDenied)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("CheckExec = %v, want it to contain %q", err, w)
				}
			}
			if err := Exec(context.Background(), f, "/bin/true", []string{"true"}, nil); !errors.Is(err, ErrExecDenied) {
				t.Errorf("Exec = %v, want %v before anything is loaded", err, ErrExecDenied)
			}
		})
	}
}
