package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/runtimes/cri"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestSeccompEffectiveOnCRIPods runs two real CRI pods and asks `seccomp
// effective` about each: one whose containers use Localhost profiles (under
// the kubelet seccomp root and outside it) and one with RuntimeDefault and
// no profile at all. (runtimetest's pods are not privileged, and kubelet's
// pod-level profile needs the sandbox's security context: both rules are
// in TestEffectiveFromCRI.) Each container's verdict
// follows kubelet's rules, and RUNTIME agrees with the OCI spec that
// containerd made.
func TestSeccompEffectiveOnCRIPods(t *testing.T) {
	testutil.RequireRoot(t)
	c := rt.Containerd(t)
	kubelet := t.TempDir()
	profile, err := os.ReadFile(filepath.Join(seccompTestdata, "runtime-default.json"))
	if err != nil {
		t.Fatal(err)
	}
	inside := filepath.Join(kubelet, "seccomp", "profiles", "default.json")
	outside := filepath.Join(t.TempDir(), "default.json")
	for _, p := range []string{inside, outside} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, profile, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(pod *runtimetest.Pod, name string, opts runtimetest.ContainerOptions) {
		opts.Name, opts.Command = name, []string{"true"}
		if code := pod.Run(t, opts).Wait(t); code != 0 {
			t.Fatalf("container %s exited %d", name, code)
		}
	}
	local := c.RunPod(t, runtimetest.PodOptions{Namespace: "shop"})
	run(local, "local", runtimetest.ContainerOptions{SeccompLocalhost: inside})
	run(local, "outside", runtimetest.ContainerOptions{SeccompLocalhost: outside})
	plain := c.RunPod(t, runtimetest.PodOptions{Namespace: "shop"})
	run(plain, "rd", runtimetest.ContainerOptions{Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}})
	run(plain, "none", runtimetest.ContainerOptions{})

	effective := func(pod *runtimetest.Pod, format string) (string, string, int) {
		return runMain(t, "seccomp", "effective", "--namespace", "shop", "--pod", pod.Config.Metadata.Name,
			"--runtime-endpoint", c.Address, "--kubelet-root-dir", kubelet, "-o", format)
	}
	stdout, stderr, code := effective(local, "table")
	if code != 3 || !strings.Contains(stderr, "1 container(s)") {
		t.Errorf("exit %d, want 3 for the profile outside the root; stderr %s", code, stderr)
	}
	want := []string{
		"CONTAINER  STATE   PROFILE    LOCALHOST              SOURCE     RUNTIME  ERROR",
		"local      EXITED  Localhost  profiles/default.json  container  yes      -",
		"outside    EXITED  -          -                      -          yes      container seccompProfile: invalid localhostProfile \"" + outside + "\": must be relative to " + filepath.Join(kubelet, "seccomp"),
	}
	if got := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("pod with Localhost profiles:\n%s\nwant:\n%s", stdout, strings.Join(want, "\n"))
	}

	stdout, stderr, code = effective(plain, "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var doc podEffective
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
	}
	got := map[string]string{}
	for _, c := range doc.Containers {
		if c.Effective == nil {
			t.Fatalf("%s: %s", c.Name, c.Error)
		}
		got[c.Name] = string(c.Effective.Type) + " " + c.Effective.Source + " " + c.RuntimeFilter
	}
	if len(got) != 2 || got["rd"] != "RuntimeDefault container yes" || got["none"] != "Unconfined default no" {
		t.Errorf("pod without Localhost profiles: %v", got)
	}
}

// TestEffectiveFromCRI applies kubelet's rules to CRI settings as kubelet
// writes them: the pod-level profile in the sandbox and copied into each
// container without one.
func TestEffectiveFromCRI(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "p.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	localhost := func(path string) *runtimeapi.SecurityProfile {
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: path}
	}
	runtimeDefault := &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	unconfined := &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
	tests := []struct {
		name       string
		sandbox    *runtimeapi.SecurityProfile
		container  *runtimeapi.SecurityProfile
		privileged bool
		want       string // type source localhost, or the error's text
	}{
		{"nothing set", nil, nil, false, "Unconfined default "},
		{"container's own", nil, runtimeDefault, false, "RuntimeDefault container "},
		{"inherited from the pod", localhost(filepath.Join(root, "p.json")), localhost(filepath.Join(root, "p.json")), false, "Localhost pod p.json"},
		{"container overrides the pod", runtimeDefault, unconfined, false, "Unconfined container "},
		{"privileged wins", runtimeDefault, localhost(filepath.Join(root, "p.json")), true, "Unconfined privileged "},
		{"outside the root", nil, localhost("/etc/p.json"), false, `container seccompProfile: invalid localhostProfile "/etc/p.json": must be relative to ` + root},
		{"escaping the root", nil, localhost(root + "/../p.json"), false, "must be relative to " + root},
		{"empty reference", nil, localhost(""), false, "must be set when type is Localhost"},
		{"missing file", localhost(filepath.Join(root, "gone.json")), nil, false, "pod seccompProfile: Localhost profile gone.json: stat " + filepath.Join(root, "gone.json") + ": no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eff, err := effectiveFromCRI(tt.sandbox, cri.ContainerSecurity{Seccomp: tt.container, Privileged: tt.privileged}, root)
			got := string(eff.Type) + " " + eff.Source + " " + eff.LocalhostProfile
			if err != nil {
				got = err.Error()
			}
			if !strings.Contains(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSeccompEffectiveUsage(t *testing.T) {
	_, stderr, code := runMain(t, "seccomp", "effective", "--namespace", "shop")
	if code != 2 || !strings.Contains(stderr, "--pod and --namespace are required") {
		t.Errorf("without --pod: exit %d, stderr %s", code, stderr)
	}
	_, stderr, code = runMain(t, "seccomp", "effective", "--pod", "web-0", "--runtime-endpoint", filepath.Join(t.TempDir(), "none.sock"))
	if code != 1 || !strings.Contains(stderr, "list pod sandboxes for default/web-0") {
		t.Errorf("without a runtime: exit %d, stderr %s", code, stderr)
	}
}
