package seccomp

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"
)

// mapLoader loads base profiles from a map, as the installer does from a
// configured set.
func mapLoader(set map[string]string) BaseLoader {
	return func(ref string) ([]byte, error) {
		d, ok := set[ref]
		if !ok {
			return nil, fmt.Errorf("open %s: %w", ref, fs.ErrNotExist)
		}
		return []byte(d), nil
	}
}

func TestResolveBase(t *testing.T) {
	set := map[string]string{
		"runtime.json": `{"defaultAction":"SCMP_ACT_ERRNO","architectures":["SCMP_ARCH_X86_64"],"flags":["SECCOMP_FILTER_FLAG_LOG"],
			"syscalls":[{"names":["execve","openat","close"],"action":"SCMP_ACT_ALLOW"},{"names":["ptrace"],"action":"SCMP_ACT_KILL_PROCESS"}]}`,
		"app.json": `{"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":38,"baseProfileName":"runtime.json","architectures":["SCMP_ARCH_X86"],
			"syscalls":[{"names":["read","close"],"action":"SCMP_ACT_ALLOW"},{"names":["openat"],"action":"SCMP_ACT_LOG"}]}`,
		"top.json":     `{"defaultAction":"SCMP_ACT_LOG","baseProfileName":"app.json","syscalls":[{"names":["write"],"action":"SCMP_ACT_ALLOW"}]}`,
		"a.json":       `{"defaultAction":"SCMP_ACT_ERRNO","baseProfileName":"b.json"}`,
		"b.json":       `{"defaultAction":"SCMP_ACT_ERRNO","baseProfileName":"c.json"}`,
		"c.json":       `{"defaultAction":"SCMP_ACT_ERRNO","baseProfileName":"a.json"}`,
		"self.json":    `{"defaultAction":"SCMP_ACT_ERRNO","baseProfileName":"self.json"}`,
		"orphan.json":  `{"defaultAction":"SCMP_ACT_ERRNO","baseProfileName":"gone.json"}`,
		"badbase.json": `{"defaultAction":"SCMP_ACT_ERRNO","baseProfileName":"invalid.json"}`,
		"invalid.json": `{"defaultAction":"SCMP_ACT_NOPE"}`,
		// Both list mkdir with conditions the other does not have: two
		// rules, no conflict.
		"args.json": `{"defaultAction":"SCMP_ACT_ERRNO","baseProfileName":"runtime.json",
			"syscalls":[{"names":["ptrace"],"action":"SCMP_ACT_ERRNO","args":[{"index":0,"value":16,"op":"SCMP_CMP_EQ"}]}]}`,
	}
	// A chain one link longer than MaxBaseDepth.
	for i := 0; i <= MaxBaseDepth+1; i++ {
		set[fmt.Sprintf("deep%d.json", i)] = fmt.Sprintf(`{"defaultAction":"SCMP_ACT_ERRNO","baseProfileName":"deep%d.json"}`, i+1)
	}
	set[fmt.Sprintf("deep%d.json", MaxBaseDepth+2)] = `{"defaultAction":"SCMP_ACT_ERRNO"}`

	type rule struct {
		action Action
		names  string
	}
	tests := []struct {
		name       string
		profile    string
		wantErr    error
		wantChain  string
		wantDef    Action
		wantArches []string
		wantRules  []rule
	}{
		{name: "no base", profile: "runtime.json", wantDef: ActErrno, wantArches: []string{"SCMP_ARCH_X86_64"},
			wantRules: []rule{{ActAllow, "execve,openat,close"}, {ActKillProcess, "ptrace"}}},
		{name: "own rule wins over base", profile: "app.json", wantDef: ActErrno,
			wantArches: []string{"SCMP_ARCH_X86", "SCMP_ARCH_X86_64"},
			// close is in both with the same verdict: kept once, in base's
			// rule; openat is LOG in app, so base's ALLOW loses it.
			wantRules: []rule{{ActAllow, "execve,close"}, {ActKillProcess, "ptrace"}, {ActAllow, "read"}, {ActLog, "openat"}}},
		{name: "two links", profile: "top.json", wantDef: ActLog,
			wantArches: []string{"SCMP_ARCH_X86", "SCMP_ARCH_X86_64"},
			wantRules:  []rule{{ActAllow, "execve,close"}, {ActKillProcess, "ptrace"}, {ActAllow, "read"}, {ActLog, "openat"}, {ActAllow, "write"}}},
		{name: "conditions differ: both rules", profile: "args.json", wantDef: ActErrno, wantArches: []string{"SCMP_ARCH_X86_64"},
			wantRules: []rule{{ActAllow, "execve,openat,close"}, {ActKillProcess, "ptrace"}, {ActErrno, "ptrace"}}},
		{name: "cycle", profile: "a.json", wantErr: ErrBaseCycle, wantChain: "a.json -> b.json -> c.json -> a.json"},
		{name: "names itself", profile: "self.json", wantErr: ErrBaseCycle, wantChain: "self.json -> self.json"},
		{name: "missing", profile: "orphan.json", wantErr: ErrBaseMissing, wantChain: "orphan.json -> gone.json"},
		{name: "invalid base", profile: "badbase.json", wantErr: ErrUnknownAction, wantChain: "badbase.json -> invalid.json"},
		{name: "too deep", profile: "deep0.json", wantErr: ErrBaseDepth},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ResolveBase(tc.profile, []byte(set[tc.profile]), ParseOptions{Arch: "amd64"}, mapLoader(set))
			if tc.wantErr != nil {
				var be *BaseError
				if !errors.Is(err, tc.wantErr) || !errors.As(err, &be) {
					t.Fatalf("err = %v, want a *BaseError wrapping %v", err, tc.wantErr)
				}
				if tc.wantChain != "" && !strings.Contains(err.Error(), tc.wantChain) {
					t.Errorf("err = %q, want the chain %q named", err, tc.wantChain)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.BaseProfileName != "" {
				t.Errorf("resolved profile still names base %q", p.BaseProfileName)
			}
			if p.DefaultAction != tc.wantDef {
				t.Errorf("default %s, want %s", p.DefaultAction, tc.wantDef)
			}
			if !slices.Equal(p.Architectures, tc.wantArches) {
				t.Errorf("architectures %v, want %v", p.Architectures, tc.wantArches)
			}
			var got []rule
			for _, s := range p.Syscalls {
				got = append(got, rule{s.Action, strings.Join(s.Names, ",")})
			}
			if !slices.Equal(got, tc.wantRules) {
				t.Errorf("rules\n got %v\nwant %v", got, tc.wantRules)
			}
		})
	}
}

// TestResolveBaseKeepsOwnErrno: the profile's own default errno and its
// own rules' errnos survive the union.
func TestResolveBaseKeepsOwnErrno(t *testing.T) {
	set := map[string]string{"base": `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ERRNO","errnoRet":13}]}`}
	own := `{"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":38,"baseProfileName":"base","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ERRNO","errnoRet":30}]}`
	p, err := ResolveBase("own", []byte(own), ParseOptions{}, mapLoader(set))
	if err != nil {
		t.Fatal(err)
	}
	if p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != 38 {
		t.Errorf("default errno %v, want 38", p.DefaultErrnoRet)
	}
	if v := p.Evaluate("mkdir", [6]uint64{}).Verdict; v != (Verdict{Action: ActErrno, Errno: 30}) {
		t.Errorf("mkdir: %v, want the profile's own EROFS", v)
	}
}

func TestResolveBaseWithoutLoader(t *testing.T) {
	_, err := ResolveBase("x", []byte(`{"defaultAction":"SCMP_ACT_ERRNO","baseProfileName":"y"}`), ParseOptions{}, nil)
	if !errors.Is(err, ErrBaseMissing) {
		t.Fatalf("err = %v, want ErrBaseMissing", err)
	}
}
