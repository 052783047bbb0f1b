package deploy

import (
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// aptLists matches the package list of the Makefile's apt-install macro in
// a dry-run recipe line: `for p in PKG PKG ...; do dpkg-query ...`.
var aptLists = regexp.MustCompile(`for p in ([^;]*); do dpkg-query`)

// dryRun returns the recipe lines `make -n TARGET` prints from the
// repository root. Nothing runs: the Makefile keeps $(MAKE) out of the
// recipes a dry run would otherwise execute.
func dryRun(t *testing.T, target string) string {
	t.Helper()
	cmd := exec.Command("make", "--no-print-directory", "-n", target)
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n %s: %v\n%s", target, err, out)
	}
	return string(out)
}

// aptPackages returns the Debian packages the dry run of target would
// install if missing.
func aptPackages(t *testing.T, target string) []string {
	t.Helper()
	var pkgs []string
	for _, m := range aptLists.FindAllStringSubmatch(dryRun(t, target), -1) {
		pkgs = append(pkgs, strings.Fields(m[1])...)
	}
	slices.Sort(pkgs)
	return slices.Compact(pkgs)
}

// TestMakeRunInstallsOnlyWhatRunningNeeds holds `make run` to building and
// running: none of the packages that only the tests need (QEMU, cpio, the
// guests' busybox, ...) and none of the test peers (kube-apiserver, etcd,
// kubectl, the vmtest runner) are installed or built before the main job.
func TestMakeRunInstallsOnlyWhatRunningNeeds(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make is needed to read the Makefile: %v", err)
	}
	run := aptPackages(t, "run")
	testOnly := aptPackages(t, "test-apt-deps")
	if len(run) == 0 || len(testOnly) == 0 {
		t.Fatalf("no apt package lists found: run %q, test-apt-deps %q", run, testOnly)
	}
	for _, p := range testOnly {
		if slices.Contains(run, p) {
			t.Errorf("make run installs %s, which only the tests need", p)
		}
	}
	for _, p := range []string{"qemu-system-x86", "cpio"} {
		if slices.Contains(run, p) {
			t.Errorf("make run installs %s", p)
		}
	}
	lines := dryRun(t, "run")
	for _, peer := range []string{"kube-apiserver", "etcd", "kubectl", "vmtest", "staticcheck"} {
		// The peer as a program or a path's last element (the kubectl
		// plugin kubectl-nodeshim, which make run builds, is not kubectl).
		if regexp.MustCompile(`(^|[\s/])` + regexp.QuoteMeta(peer) + `([\s;:]|-[0-9v]|$)`).MatchString(lines) {
			t.Errorf("make run prepares the test peer %s:\n%s", peer, lines)
		}
	}
	if !strings.Contains(lines, "nodeshim serve") {
		t.Errorf("make run does not run nodeshim serve:\n%s", lines)
	}
}
