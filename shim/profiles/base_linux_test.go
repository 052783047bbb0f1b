package profiles

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/kernel/seccomp"
)

// TestApplyBaseProfile: a profile naming a baseProfileName is installed
// as the union with its base, wherever the base comes from; a cycle, a
// missing base and an oci:// base install nothing and name the chain.
func TestApplyBaseProfile(t *testing.T) {
	app := `{"defaultAction":"SCMP_ACT_ERRNO","baseProfileName":"%s","syscalls":[{"names":["write"],"action":"SCMP_ACT_ALLOW"}]}`
	runtimeNeeds := `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["execve","read"],"action":"SCMP_ACT_ALLOW"}]}`
	tests := []struct {
		name string
		base string
		// setup puts the base where it is read from.
		setup   func(e *env) map[string]string
		wantErr error
		chain   string
		// reason is the condition's reason on failure; InvalidProfile
		// when empty.
		reason string
	}{
		{name: "in the set", base: "runtime.json", setup: func(*env) map[string]string {
			return map[string]string{"runtime.json": runtimeNeeds}
		}},
		{name: "a file on the node", base: "ABS", setup: func(e *env) map[string]string {
			e.write("bases/runtime.json", runtimeNeeds)
			return nil
		}},
		{name: "installed under the root", base: "shared/runtime.json", setup: func(e *env) map[string]string {
			e.write("kubelet/seccomp/shared/runtime.json", runtimeNeeds)
			return nil
		}},
		{name: "missing", base: "nowhere.json", wantErr: seccomp.ErrBaseMissing, chain: "app.json -> nowhere.json"},
		{name: "cycle", base: "loop.json", setup: func(*env) map[string]string {
			return map[string]string{"loop.json": `{"defaultAction":"SCMP_ACT_ERRNO","baseProfileName":"app.json"}`}
		}, wantErr: seccomp.ErrBaseCycle, chain: "app.json -> loop.json -> app.json"},
		{name: "oci", base: "oci://127.0.0.1:5000/profiles/runtime:v1", wantErr: ErrOCIBase},
		{name: "symlink under the root", base: "link.json", setup: func(e *env) map[string]string {
			e.write("bases/runtime.json", runtimeNeeds)
			if err := os.Symlink(filepath.Join(e.dir, "bases/runtime.json"), filepath.Join(e.dir, "kubelet/seccomp/link.json")); err != nil {
				t.Fatal(err)
			}
			return nil
		}, wantErr: ErrSymlink, reason: ReasonProfileConflict},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			if err := os.MkdirAll(filepath.Join(e.dir, "kubelet/seccomp"), 0o755); err != nil {
				t.Fatal(err)
			}
			set := map[string]string{}
			if tc.setup != nil {
				for k, v := range tc.setup(e) {
					set[k] = v
				}
			}
			base := tc.base
			if base == "ABS" {
				base = filepath.Join(e.dir, "bases/runtime.json")
			}
			set["app.json"] = strings.Replace(app, "%s", base, 1)
			in := e.installer("kubelet")
			installed, err := in.Apply(set)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				if tc.chain != "" && !strings.Contains(err.Error(), tc.chain) {
					t.Errorf("err = %q does not name the chain %q", err, tc.chain)
				}
				if len(installed) != 0 {
					t.Errorf("installed %v after a failed check", installed)
				}
				want := tc.reason
				if want == "" {
					want = ReasonInvalidProfile
				}
				if c := Condition(in.Root, len(set), installed, err); c.Reason != want {
					t.Errorf("reason %s, want %s", c.Reason, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := e.files("kubelet")["app.json"]
			p, err := seccomp.Parse([]byte(got), Node())
			if err != nil {
				t.Fatalf("installed union does not parse: %v\n%s", err, got)
			}
			if p.BaseProfileName != "" {
				t.Errorf("installed profile still names a base: %s", got)
			}
			for _, n := range []string{"execve", "read", "write"} {
				if v := p.Evaluate(n, [6]uint64{}).Verdict; v.Action != seccomp.ActAllow {
					t.Errorf("%s: %s in the installed union, want allowed:\n%s", n, v, got)
				}
			}
			if v := p.Evaluate("mkdir", [6]uint64{}).Verdict; v.Action != seccomp.ActErrno {
				t.Errorf("mkdir: %s, want the profile's default", v)
			}
			for _, i := range installed {
				if i.Name == "app.json" && i.SHA256 != Hash([]byte(got)) {
					t.Errorf("manifest hash %s is not the installed content's", i.SHA256)
				}
			}
		})
	}
}
