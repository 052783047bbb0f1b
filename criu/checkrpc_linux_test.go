package criu

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/testenv/testutil"
	"golang.org/x/sys/unix"
)

// cliAnswers asks bin on the command line what rpcChecks asks it over RPC.
func cliAnswers(t *testing.T, bin Binary, names []string) checkResults {
	t.Helper()
	r := checkResults{features: map[string]error{}}
	r.version, r.verErr = bin.Version(t.Context())
	r.checkMsg, r.checkErr = bin.Check(t.Context())
	for _, n := range names {
		r.features[n] = bin.CheckFeature(t.Context(), n)
	}
	return r
}

// firstLine is the first line of CRIU's message in err.
func firstLine(err error) string {
	msg, _, _ := strings.Cut(failureMessage(err), "; ")
	return msg
}

// TestRPCChecksAgreeWithCommandLine: one swrk session gives the version,
// the check's verdict and the RPC features that `criu --version`, `criu
// check` and `criu check --feature` give on this machine; a feature it
// finds missing, and every feature RPC does not know, is left to the
// command line. With CAP_SYS_ADMIN out of the bounding set, `criu check`
// fails both ways, and the session keeps CRIU's own message.
func TestRPCChecksAgreeWithCommandLine(t *testing.T) {
	real := requireCriu(t)
	setpriv := testutil.RequireBinary(t, "setpriv")
	names := make([]string, len(ProbedFeatures))
	for i, f := range ProbedFeatures {
		names[i] = f.Name
	}
	noAdmin := Binary{Path: filepath.Join(t.TempDir(), "criu"), Source: "configured"}
	script := fmt.Sprintf("#!/bin/sh\nexec %s --bounding-set -sys_admin %s \"$@\"\n", setpriv, real.Path)
	if err := os.WriteFile(noAdmin.Path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, bin := range []Binary{real, noAdmin} {
		t.Run(bin.Path, func(t *testing.T) {
			want := cliAnswers(t, bin, names)
			var early [][]string
			got, rest, err := rpcChecks(t.Context(), bin, nil, names, func(rest []string) {
				early = append(early, slices.Clone(rest))
			})
			if err != nil {
				t.Fatalf("session: %v", err)
			}
			// The names left to the command line are known, and handed
			// over, once FEATURE_CHECK has answered, before CHECK; a
			// FEATURE_CHECK that fails (without CAP_SYS_ADMIN) hands over
			// nothing.
			if len(early) > 1 || (len(early) == 1 && !slices.Equal(early[0], rest)) || (bin == real && len(early) == 0) {
				t.Errorf("handed over early: %q; want the rest %q once (none when FEATURE_CHECK fails)", early, rest)
			}
			if got.version != want.version || want.verErr != nil {
				t.Errorf("version %v, command line %v (%v)", got.version, want.version, want.verErr)
			}
			switch {
			case (got.checkErr == nil) != (want.checkErr == nil):
				t.Errorf("check %q, %v; command line %q, %v", got.checkMsg, got.checkErr, want.checkMsg, want.checkErr)
			case want.checkErr == nil && got.checkMsg != want.checkMsg:
				t.Errorf("check says %q, command line %q", got.checkMsg, want.checkMsg)
			case want.checkErr != nil && (!errors.Is(got.checkErr, ErrCheckFailed) || firstLine(got.checkErr) != firstLine(want.checkErr)):
				t.Errorf("check fails with %v; command line %v", got.checkErr, want.checkErr)
			}
			left := map[string]bool{}
			for _, n := range rest {
				left[n] = true
			}
			for _, n := range names {
				ferr, answered := got.features[n]
				switch {
				case answered && left[n]:
					t.Errorf("feature %s both answered (%v) and left to the command line", n, ferr)
				case answered && (ferr != nil || want.features[n] != nil):
					t.Errorf("feature %s: session %v, command line %v", n, ferr, want.features[n])
				case !answered && !left[n]:
					t.Errorf("feature %s neither answered nor left to the command line", n)
				case !answered && rpcFeatures[n] != nil && want.features[n] == nil:
					t.Errorf("feature %s left to the command line, which finds it supported", n)
				}
			}
		})
	}
}

// envKerndatChild makes TestKerndatKeptOnAFreshBoot run the report's
// entries in the mount namespace its parent prepared.
const envKerndatChild = "NODESHIM_TEST_KERNDAT_CHILD"

// TestKerndatKeptOnAFreshBoot: on a /run that is a tmpfs holding a stale
// criu.kdat.tmp (a criu killed while saving its kernel facts), the
// report's entries remove it, say so in criu.check, and the criu runs
// after leave the facts in /run/criu.kdat. The test binary reruns itself
// in a mount namespace of its own with an empty tmpfs on /run, as at boot
// on a systemd host; the machine's /run is untouched.
func TestKerndatKeptOnAFreshBoot(t *testing.T) {
	if os.Getenv(envKerndatChild) != "" {
		fs := findings(t)
		if f := fs["criu.check"]; !strings.Contains(f.Evidence, "removed stale "+filepath.Join(KerndatDir, "criu.kdat.tmp")) {
			t.Errorf("criu.check evidence %q does not say the stale temporary file was removed", f.Evidence)
		}
		if fi, err := os.Stat(filepath.Join(KerndatDir, "criu.kdat")); err != nil || fi.Size() == 0 {
			t.Errorf("no kernel facts kept after the report's criu runs: %v", err)
		}
		return
	}
	bin := requireCriu(t)
	unshare := testutil.RequireBinary(t, "unshare")
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs tmpfs /run && : >/run/criu.kdat.tmp && touch -d '1 hour ago' /run/criu.kdat.tmp && exec "$0" "$@"`,
		os.Args[0], "-test.run", "^TestKerndatKeptOnAFreshBoot$", "-test.v")
	cmd.Env = append(os.Environ(), envKerndatChild+"=1", EnvCriu+"="+bin.Path)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil || !strings.Contains(string(out), "--- PASS: TestKerndatKeptOnAFreshBoot") {
		t.Errorf("the report's entries in a fresh mount namespace: %v", err)
	}
}

// TestPrivateRunKeepsKerndat: criu processes started through a privateRun
// share a tmpfs of their own on KerndatDir, where the first leaves its
// kernel facts for the next; the rest of the process, and the machine,
// still see KerndatDir as it was. kerndatRun uses one exactly when
// KerndatDir is not a tmpfs.
func TestPrivateRunKeepsKerndat(t *testing.T) {
	bin := requireCriu(t)
	var before unix.Statfs_t
	if err := unix.Statfs(KerndatDir, &before); err != nil {
		t.Fatal(err)
	}
	names := func() []string {
		ents, err := os.ReadDir(KerndatDir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range ents {
			out = append(out, e.Name())
		}
		return out
	}
	outside := names()

	pr, err := newPrivateRun(KerndatDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bin.check(t.Context(), pr.start); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd := exec.Command("stat", "-f", "-c", "%T", KerndatDir, "--", filepath.Join(KerndatDir, "criu.kdat"))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := pr.start(cmd); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	pr.close()
	if err != nil || !strings.HasPrefix(out.String(), "tmpfs\n") {
		t.Errorf("in the private run, %s is not a tmpfs holding criu.kdat: %v\n%s", KerndatDir, err, out.String())
	}

	var after unix.Statfs_t
	if err := unix.Statfs(KerndatDir, &after); err != nil {
		t.Fatal(err)
	}
	if after.Type != before.Type || !slices.Equal(names(), outside) {
		t.Errorf("%s changed outside the private run: type %#x -> %#x, files %q -> %q", KerndatDir, before.Type, after.Type, outside, names())
	}

	checkFirst, start, stop, note := kerndatRun(KerndatDir, time.Now())
	stop()
	if isTmpfs := before.Type == unix.TMPFS_MAGIC; (start != nil) == isTmpfs || (!isTmpfs && !checkFirst) {
		t.Errorf("%s tmpfs %v: kerndatRun checkFirst %v, private run %v (note %q)", KerndatDir, isTmpfs, checkFirst, start != nil, note)
	}
}
