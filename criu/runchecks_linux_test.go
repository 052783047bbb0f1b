package criu

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/internal/testutil"
	"golang.org/x/sys/unix"
)

// fakeCriu writes a stand-in criu that logs each run to log ("check-done"
// when `criu check` ends, "feature NAME" for `check --feature NAME`) and
// whose `criu check` passes or fails as told.
func fakeCriu(t *testing.T, checkPasses bool) (Binary, string) {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	exit := "0"
	msg := "Looks good."
	if !checkPasses {
		exit, msg = "1", "Error (criu/cr-check.c:1): broken"
	}
	script := `#!/bin/sh
case "$1 $2" in
"--version ") echo "Version: 4.1.1" ;;
"check ") sleep 0.05; echo check-done >>` + log + `; echo "` + msg + `"; exit ` + exit + ` ;;
"check --feature") echo "feature $3" >>` + log + `; echo "$3 is supported" ;;
*) exit 2 ;;
esac
`
	bin := Binary{Path: filepath.Join(dir, "criu"), Source: "configured"}
	if err := os.WriteFile(bin.Path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, log
}

func readLog(t *testing.T, p string) []string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(b)), "feature ", "feature:"))
}

// TestRunChecksCheckFirst: when the first criu run leaves its kernel facts
// for the others, the features run after `criu check`, and not at all when
// it fails; otherwise every run starts at once and all answers are there.
func TestRunChecksCheckFirst(t *testing.T) {
	testutil.RequireRoot(t)
	names := []string{"timens", "pidfd_store"}
	for _, tc := range []struct {
		name               string
		checkFirst, passes bool
	}{
		{"check first, passes", true, true},
		{"check first, fails", true, false},
		{"all at once, passes", false, true},
		{"all at once, fails", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin, log := fakeCriu(t, tc.passes)
			r := runChecks(t.Context(), bin, names, tc.checkFirst)
			if r.verErr != nil || r.version != (Version{4, 1, 1}) {
				t.Errorf("version %v, %v", r.version, r.verErr)
			}
			if (r.checkErr == nil) != tc.passes || (r.checkErr != nil && !errors.Is(r.checkErr, ErrCheckFailed)) {
				t.Errorf("check: %q, %v", r.checkMsg, r.checkErr)
			}
			runs := readLog(t, log)
			for _, n := range names {
				ferr, ok := r.features[n]
				if !ok {
					t.Errorf("no answer for feature %s", n)
				}
				ran := slices.Index(runs, "feature:"+n)
				switch {
				case tc.checkFirst && !tc.passes:
					if ran >= 0 || !errors.Is(ferr, ErrCheckFailed) || !strings.Contains(ferr.Error(), "not run") {
						t.Errorf("feature %s ran (log %q) or answered %v after a failed check", n, runs, ferr)
					}
				case tc.checkFirst:
					if ran < slices.Index(runs, "check-done") || ferr != nil {
						t.Errorf("feature %s: log %q, answer %v; want it run after the check, supported", n, runs, ferr)
					}
				case ran < 0 || ferr != nil:
					t.Errorf("feature %s: log %q, answer %v; want it run, supported", n, runs, ferr)
				}
			}
		})
	}
}

// TestCriuKeepsKerndat: no kernel facts are kept where the directory is
// missing, is not a tmpfs, already holds them, or holds a stale temporary
// file that makes criu give up saving; an empty tmpfs directory (one made
// in /dev/shm, when this machine has it as a tmpfs) keeps them.
func TestCriuKeepsKerndat(t *testing.T) {
	var st unix.Statfs_t
	if unix.Statfs("/dev/shm", &st) == nil && st.Type == unix.TMPFS_MAGIC {
		dir, err := os.MkdirTemp("/dev/shm", "kdat")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if !criuKeepsKerndat(dir) {
			t.Errorf("an empty tmpfs directory %s keeps no kernel facts", dir)
		}
	}
	if criuKeepsKerndat(filepath.Join(t.TempDir(), "missing")) {
		t.Error("a missing directory keeps kernel facts")
	}
	for _, name := range []string{"criu.kdat", "criu.kdat.tmp"} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if criuKeepsKerndat(dir) {
			t.Errorf("%s present, yet criu would keep kernel facts in %s", name, dir)
		}
	}
}
