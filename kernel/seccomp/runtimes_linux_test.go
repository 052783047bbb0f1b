package seccomp_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/kernel/seccomp"
	"github.com/nodeshim/nodeshim/shim/config"
	"github.com/nodeshim/nodeshim/shim/profiles"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// rt is the package's real container runtimes (export_test.go), started on
// first use and closed by TestMain.
var rt = seccomp.Runtimes

// denyMkdirEPERM returns the runtime default profile (testdata) with mkdir
// and mkdirat taken out of its allow rule and named in a rule of their own
// that answers EPERM: a profile a cluster would plausibly install, whose one
// difference from RuntimeDefault is observable in a shell.
func denyMkdirEPERM(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile("testdata/runtime-default.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	denied := []string{"mkdir", "mkdirat"}
	rules := doc["syscalls"].([]any)
	removed := 0
	for _, r := range rules {
		rule := r.(map[string]any)
		var names []any
		for _, n := range rule["names"].([]any) {
			if slices.Contains(denied, n.(string)) {
				removed++
				continue
			}
			names = append(names, n)
		}
		rule["names"] = names
	}
	if removed != len(denied) {
		t.Fatalf("testdata/runtime-default.json allows %d of %v, want all", removed, denied)
	}
	doc["syscalls"] = append(rules, map[string]any{"names": denied, "action": "SCMP_ACT_ERRNO", "errnoRet": 1})
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// installFromConfiguration installs profile as serve does: named
// profiles/deny-mkdir-eperm.json in the seccompProfiles/ directory of a
// configuration source whose kubeletRootDir is a temporary directory, the
// source read and loaded by shim/config, and the configured profiles
// installed by shim/profiles' Installer under the kubelet's seccomp root.
// It returns the path installed.
func installFromConfiguration(t *testing.T, profile []byte) string {
	t.Helper()
	dir := t.TempDir()
	source, kubelet := filepath.Join(dir, "config"), filepath.Join(dir, "kubelet")
	const name = "profiles/deny-mkdir-eperm.json"
	if err := os.MkdirAll(filepath.Join(source, config.ProfilesDir, "profiles"), 0o755); err != nil {
		t.Fatal(err)
	}
	base := "apiVersion: " + config.APIVersion + "\nkind: " + config.Kind + "\nkubeletRootDir: " + kubelet + "\n"
	if err := os.WriteFile(filepath.Join(source, config.BaseFile), []byte(base), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(source, config.ProfilesDir, name), profile, 0o644); err != nil {
		t.Fatal(err)
	}
	payload, err := config.ReadSource(source)
	if err != nil {
		t.Fatal(err)
	}
	c, err := payload.Load()
	if err != nil {
		t.Fatal(err)
	}
	in := &profiles.Installer{
		Root:     profiles.SeccompRoot(c.KubeletRootDir),
		StateDir: filepath.Join(dir, "state"),
		Parse:    profiles.Node(),
	}
	installed, err := in.Apply(c.SeccompProfiles)
	if err != nil {
		t.Fatal(err)
	}
	if len(installed) != 1 || installed[0].Name != name || installed[0].Path != filepath.Join(kubelet, "seccomp", name) {
		t.Fatalf("installed %+v, want %s under %s", installed, name, kubelet)
	}
	return installed[0].Path
}

// TestLocalhostProfileOnRealRuntimes installs a Localhost profile from
// nodeshim's configuration as serve does (installFromConfiguration) and
// runs a busybox container with it under each real runtime: containerd's CRI (SecurityProfile
// Localhost, as kubelet passes it) with runc and with crun, and podman
// (--security-opt seccomp=PATH) with runc and with crun. The denied
// syscall fails with EPERM in the container, everything else runs, and
// the same container without the profile creates the directory. Verify
// (what `nodeshim seccomp verify` runs) agrees on the denied syscalls.
func TestLocalhostProfileOnRealRuntimes(t *testing.T) {
	testutil.RequireRoot(t)
	profile := denyMkdirEPERM(t)
	path := installFromConfiguration(t, profile)
	opts := seccomp.NodeParseOptions(nil)

	// What nodeshim says the profile does to mkdir and mkdirat, proven on
	// this kernel.
	p, err := seccomp.Parse(profile, opts)
	if err != nil {
		t.Fatal(err)
	}
	f, err := seccomp.Compile(p, seccomp.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rep, err := seccomp.Verify(context.Background(), p, f, seccomp.VerifyOptions{Sample: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("verify: %d probes in %v: %d ok, %d mismatches, %d inconclusive", rep.Probed, time.Since(start), rep.OK, rep.Mismatches, rep.Inconclusive)
	if rep.Mismatches != 0 {
		t.Errorf("verify: %d mismatches", rep.Mismatches)
	}
	verified := map[string]bool{}
	for _, r := range rep.Results {
		if r.Syscall != "mkdir" && r.Syscall != "mkdirat" {
			continue
		}
		// EPERM is errno 1, what the containers' mkdir reports below.
		if r.Status != seccomp.StatusOK || r.Expected != "ERRNO(1)" || !strings.HasPrefix(r.Observed, "errno 1 ") {
			t.Errorf("verify %s (%s): expected %s, observed %s: %s", r.Syscall, r.Arch, r.Expected, r.Observed, r.Status)
		}
		verified[r.Syscall] = true
	}
	if !verified["mkdir"] || !verified["mkdirat"] {
		t.Fatalf("verify probed %v of mkdir and mkdirat", verified)
	}

	// Everything goes to stdout, so that the order survives the runtimes'
	// separate log streams.
	script := `echo ok; grep '^Seccomp:' /proc/self/status; mkdir /tmp/x 2>&1; echo "mkdir=$?"; ls -d /tmp/x 2>/dev/null || echo absent`
	cmd := []string{"sh", "-c", script}
	const wantDenied = "ok\nSeccomp:\t2\nmkdir: can't create directory '/tmp/x': Operation not permitted\nmkdir=1\nabsent\n"
	// The control runs without a profile: CRI's default is unconfined
	// (mode 0), podman's its own default profile (mode 2); both allow mkdir.
	wantAllowed := func(mode string) string { return "ok\nSeccomp:\t" + mode + "\nmkdir=0\n/tmp/x\n" }

	cri := func(handler string) func(t *testing.T, seccomp string) string {
		return func(t *testing.T, seccomp string) string {
			c := rt.Containerd(t)
			pod := c.RunPod(t, runtimetest.PodOptions{RuntimeHandler: handler})
			ctr := pod.Run(t, runtimetest.ContainerOptions{Command: cmd, SeccompLocalhost: seccomp})
			if code := ctr.Wait(t); code != 0 {
				t.Errorf("exit code %d", code)
			}
			return ctr.Logs(t)
		}
	}
	podman := func(runtime string) func(t *testing.T, seccomp string) string {
		return func(t *testing.T, seccomp string) string {
			res := rt.Podman(t).Run(t, runtimetest.RunOptions{Runtime: runtime, Seccomp: seccomp, Command: cmd})
			if res.ExitCode != 0 || res.Stderr != "" {
				t.Errorf("podman run: exit %d, stderr %q", res.ExitCode, res.Stderr)
			}
			return res.Stdout
		}
	}
	tests := []struct {
		name        string
		run         func(t *testing.T, seccomp string) string
		controlMode string
	}{
		{"containerd CRI runc", cri(runtimetest.RuntimeRunc), "0"},
		{"containerd CRI crun", cri(runtimetest.RuntimeCrun), "0"},
		{"podman runc", podman(runtimetest.RuntimeRunc), "2"},
		{"podman crun", podman(runtimetest.RuntimeCrun), "2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			if got := tt.run(t, path); got != wantDenied {
				t.Errorf("with %s:\n%s\nwant:\n%s", path, got, wantDenied)
			}
			withProfile := time.Since(start)
			if got, want := tt.run(t, ""), wantAllowed(tt.controlMode); got != want {
				t.Errorf("without a profile:\n%s\nwant:\n%s", got, want)
			}
			t.Logf("run with the profile %v, control %v", withProfile, time.Since(start)-withProfile)
		})
	}
}
