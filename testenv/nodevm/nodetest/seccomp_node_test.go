//go:build nodevm

package nodetest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/nodevm"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// seccompRoot is the kubelet's seccomp root on the node (nodeshim's
// default kubeletRootDir).
const seccompRoot = "/var/lib/kubelet/seccomp"

// TestSeccompLocalhostProfileEnforced: the Localhost profile in nodeshim
// serve's configuration (nodevm.DenyMkdirProfile: allow all but mkdir and
// mkdirat, which fail with EPERM) is installed under the kubelet's seccomp
// root and listed in GET /status; a CRI container whose security context
// names it, as kubelet passes a Localhost profile, runs under it with each
// runtime handler of the node (runc 1.5 and crun): the workload runs and
// writes a file, its mkdir fails with EPERM and creates nothing, and its
// process is in seccomp filter mode.
func TestSeccompLocalhostProfileEnforced(t *testing.T) {
	requireNode(t)
	path := filepath.Join(seccompRoot, nodevm.DenyMkdirProfile)
	testutil.Eventually(t, "GET /status lists "+nodevm.DenyMkdirProfile+" installed", func() error {
		var doc status.Document
		if err := getJSON(t, "/status", &doc); err != nil {
			return err
		}
		if doc.SeccompProfiles == nil {
			return fmt.Errorf("no seccompProfiles in the status yet")
		}
		for _, p := range doc.SeccompProfiles.Installed {
			if p.Name == nodevm.DenyMkdirProfile {
				if p.Path != path {
					return fmt.Errorf("%s installed at %s, want %s", p.Name, p.Path, path)
				}
				_, err := os.Stat(path)
				return err
			}
		}
		return fmt.Errorf("installed: %+v", doc.SeccompProfiles.Installed)
	})
	for _, handler := range []string{"runc", "crun"} {
		t.Run(handler, func(t *testing.T) {
			start := time.Now()
			p := runPodOn(t, "seccomp-"+handler, handler)
			var sandbox struct {
				Status struct {
					RuntimeHandler string `json:"runtimeHandler"`
				} `json:"status"`
			}
			if err := json.Unmarshal([]byte(run(t, crictlBin, "inspectp", "-o", "json", p.ID)), &sandbox); err != nil {
				t.Fatalf("crictl inspectp %s: %v", p.ID, err)
			}
			if sandbox.Status.RuntimeHandler != handler {
				t.Errorf("pod %s runs on handler %q, want %s", p.Name, sandbox.Status.RuntimeHandler, handler)
			}
			c := p.runContainer(t, containerOptions{Name: "probe", SeccompLocalhost: path,
				Command: []string{"sh", "-c", `{ echo allowed > /allowed && echo wrote; mkdir /denied; echo "mkdir rc=$?"; } > /result 2>&1; sleep 3600`}})
			var result string
			testutil.Eventually(t, "the probe's /result", func() error {
				out, err := runErr(crictlBin, "exec", c.ID, "cat", "/result")
				if err != nil {
					return err
				}
				if !strings.Contains(out, "mkdir rc=") {
					return fmt.Errorf("/result so far %q", out)
				}
				result = out
				return nil
			})
			if !strings.Contains(result, "wrote") {
				t.Errorf("%s: the allowed workload did not run under the profile: %q", handler, result)
			}
			if !strings.Contains(result, "Operation not permitted") || strings.Contains(result, "mkdir rc=0") {
				t.Errorf("%s: mkdir under %s: %q; want EPERM (Operation not permitted)", handler, nodevm.DenyMkdirProfile, result)
			}
			if out, err := runErr(crictlBin, "exec", c.ID, "ls", "-d", "/denied"); err == nil {
				t.Errorf("%s: /denied exists in the container (%q) though mkdir is denied", handler, out)
			}
			out := run(t, crictlBin, "inspect", "-o", "json", c.ID)
			var in struct {
				Info struct {
					Pid            int             `json:"pid"`
					RuntimeOptions json.RawMessage `json:"runtimeOptions"`
					RuntimeSpec    struct {
						Linux struct {
							Seccomp *struct {
								DefaultAction string `json:"defaultAction"`
							} `json:"seccomp"`
						} `json:"linux"`
					} `json:"runtimeSpec"`
				} `json:"info"`
			}
			if err := json.Unmarshal([]byte(out), &in); err != nil {
				t.Fatalf("crictl inspect %s: %v", c.ID, err)
			}
			// The handler's runtime binary, as containerd's shim runs it.
			if opts := string(in.Info.RuntimeOptions); strings.Contains(opts, "/usr/bin/crun") != (handler == "crun") {
				t.Errorf("%s: container's runtime options %s", handler, opts)
			}
			t.Logf("%s: runtime options %s", handler, in.Info.RuntimeOptions)
			if s := in.Info.RuntimeSpec.Linux.Seccomp; s == nil || s.DefaultAction != "SCMP_ACT_ALLOW" {
				t.Errorf("%s: OCI spec seccomp %+v; want the profile's (defaultAction SCMP_ACT_ALLOW)", handler, s)
			}
			st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", in.Info.Pid))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(st), "\nSeccomp:\t2\n") {
				t.Errorf("%s: container process %d not in seccomp filter mode", handler, in.Info.Pid)
			}
			t.Logf("%s: %q in %s", handler, strings.TrimSpace(result), time.Since(start).Round(time.Millisecond))
		})
	}
}
