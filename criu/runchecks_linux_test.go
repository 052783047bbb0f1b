package criu

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/testenv/testutil"
	"golang.org/x/sys/unix"
)

// fakeCriu writes a stand-in criu that logs each run to log ("check-done"
// when `criu check` ends, "feature NAME" for `check --feature NAME`) and
// whose `criu check` passes or fails as told. It fails `criu swrk`, so
// runChecks falls back to the command line for every answer.
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
// That holds on the command line, after a failed swrk session.
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
			r := runChecks(t.Context(), bin, nil, names, tc.checkFirst)
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
					if ran >= 0 || !errors.Is(ferr, ErrCheckFailed) || !strings.Contains(ferr.Error(), "not used") {
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

// kerndatDirs returns a directory on a tmpfs and one on another
// filesystem, both empty and removed after the test: /dev/shm or the
// temporary directory for the first, the temporary directory or /var/tmp
// for the second.
func kerndatDirs(t *testing.T) (tmpfs, disk string) {
	t.Helper()
	for _, base := range []string{"/dev/shm", os.TempDir(), "/var/tmp"} {
		var st unix.Statfs_t
		if unix.Statfs(base, &st) != nil {
			continue
		}
		isTmpfs := st.Type == unix.TMPFS_MAGIC
		if (isTmpfs && tmpfs != "") || (!isTmpfs && disk != "") {
			continue
		}
		dir, err := os.MkdirTemp(base, "kdat")
		if err != nil {
			continue
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if isTmpfs {
			tmpfs = dir
		} else {
			disk = dir
		}
	}
	if tmpfs == "" || disk == "" {
		testutil.Skip(t, "no writable tmpfs (%q) or other filesystem (%q) among /dev/shm, %s, /var/tmp", tmpfs, disk, os.TempDir())
	}
	return tmpfs, disk
}

// TestPrepareKerndat: criu keeps its kernel facts only in an empty tmpfs
// directory; a temporary file there that no live save can own (dated
// before the boot, or older than staleKerndatTmp) is removed first and
// said so; on another filesystem nothing is kept, CRIU's empty leftover
// temporary file stays, and a criu.kdat from before the boot is removed.
func TestPrepareKerndat(t *testing.T) {
	testutil.RequireRoot(t)
	now := time.Now()
	boot := now.Add(-time.Hour)
	type file struct {
		name string
		at   time.Time
	}
	for _, tc := range []struct {
		name  string
		tmpfs bool
		files []file
		keeps bool
		left  []string // the files still there afterwards
		note  string   // a substring of the note; "" for none
	}{
		{"tmpfs empty", true, nil, true, nil, ""},
		{"tmpfs facts kept", true, []file{{"criu.kdat", now}}, false, []string{"criu.kdat"}, ""},
		{"tmpfs temp file being saved", true, []file{{"criu.kdat.tmp", now.Add(-time.Second)}}, false, []string{"criu.kdat.tmp"}, ""},
		{"tmpfs stale temp file", true, []file{{"criu.kdat.tmp", now.Add(-2 * staleKerndatTmp)}}, true, nil, "removed stale"},
		{"tmpfs temp file before boot", true, []file{{"criu.kdat.tmp", boot.Add(-time.Minute)}}, true, nil, "removed stale"},
		{"tmpfs stale temp file and facts", true, []file{{"criu.kdat.tmp", now.Add(-time.Hour)}, {"criu.kdat", now}}, false, []string{"criu.kdat"}, "removed stale"},
		{"disk empty", false, nil, false, nil, ""},
		{"disk leftover temp file", false, []file{{"criu.kdat.tmp", boot.Add(-time.Minute)}}, false, []string{"criu.kdat.tmp"}, ""},
		{"disk facts of this boot", false, []file{{"criu.kdat", now}}, false, []string{"criu.kdat"}, ""},
		{"disk facts of an earlier boot", false, []file{{"criu.kdat", boot.Add(-time.Minute)}}, false, nil, "before this boot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpfs, disk := kerndatDirs(t)
			dir := disk
			if tc.tmpfs {
				dir = tmpfs
			}
			for _, f := range tc.files {
				p := filepath.Join(dir, f.name)
				if err := os.WriteFile(p, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chtimes(p, f.at, f.at); err != nil {
					t.Fatal(err)
				}
			}
			keeps, note := prepareKerndat(dir, tc.tmpfs, boot, now)
			if keeps != tc.keeps {
				t.Errorf("keeps = %v, want %v (note %q)", keeps, tc.keeps, note)
			}
			if (tc.note == "") != (note == "") || !strings.Contains(note, tc.note) {
				t.Errorf("note %q, want one with %q", note, tc.note)
			}
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var left []string
			for _, e := range ents {
				left = append(left, e.Name())
			}
			if !slices.Equal(left, tc.left) {
				t.Errorf("files left %q, want %q", left, tc.left)
			}
		})
	}
	checkFirst, start, stop, note := kerndatRun(filepath.Join(t.TempDir(), "missing"), now)
	stop()
	if checkFirst || start != nil || !strings.Contains(note, "criu keeps no kernel facts") {
		t.Errorf("a missing directory: checkFirst %v, starter %v, note %q; want no kernel facts kept, and said so", checkFirst, start != nil, note)
	}
}

// TestRunChecksSwrkCheckFirst: when the first criu run leaves its kernel
// facts for the others, the swrk session answers the version, the check
// and the features FEATURE_CHECK finds; the features it leaves to the
// command line (one it finds missing, one it does not know) start once
// FEATURE_CHECK has answered and run alongside CHECK. When CHECK fails they
// are stopped and no feature answer is used; when it passes they complete
// and count. No other criu command runs. The criu is a stand-in speaking
// swrk's protocol (fakeSwrkCriu): CRIU itself cannot be made to fail only
// the full check.
func TestRunChecksSwrkCheckFirst(t *testing.T) {
	testutil.RequireRoot(t)
	names := []string{"mem_dirty_track", "uffd-noncoop", "pidfd_store", "timens"}
	cli := []string{"uffd-noncoop", "timens"}
	has := map[string]bool{"mem_track": true, "pidfd_store": true}
	// A run that CHECK's answer waits for and that never starts fails the
	// test before go test's timeout ends it.
	var giveUp time.Time
	if d, ok := t.Deadline(); ok {
		giveUp = d.Add(-time.Until(d) / 10)
	}
	for _, tc := range []struct {
		name   string
		passes bool
	}{
		{"check passes", true},
		{"check fails", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The feature runs block when the check fails: only a stop
			// ends them before fakeFeatureBlock.
			bin, log := fakeSwrkCriu(t, fakeSwrk{CheckPasses: tc.passes, Has: has, Await: cli, GiveUp: giveUp, Block: !tc.passes})
			r := runChecks(t.Context(), bin, nil, names, true)
			if r.verErr != nil || r.version != (Version{4, 1, 1}) {
				t.Errorf("version %v, %v; want the session's 4.1.1", r.version, r.verErr)
			}
			switch {
			case tc.passes && (r.checkErr != nil || r.checkMsg != "Looks good."):
				t.Errorf("check: %q, %v; want the session's \"Looks good.\"", r.checkMsg, r.checkErr)
			case !tc.passes && (!errors.Is(r.checkErr, ErrCheckFailed) || !strings.Contains(r.checkErr.Error(), fakeCheckError)):
				t.Errorf("check: %q, %v; want %v with the log's %q", r.checkMsg, r.checkErr, ErrCheckFailed, fakeCheckError)
			}
			for _, n := range names {
				ferr, ok := r.features[n]
				switch {
				case !ok:
					t.Errorf("no answer for feature %s", n)
				case tc.passes && ferr != nil:
					t.Errorf("feature %s: %v; want supported", n, ferr)
				case !tc.passes && (!errors.Is(ferr, ErrCheckFailed) || !strings.Contains(ferr.Error(), "not used")):
					t.Errorf("feature %s: %v; want %v, not used", n, ferr, ErrCheckFailed)
				}
			}
			// The session's requests in order, then the feature runs
			// started (before CHECK's answer, which waits for them) and,
			// only when the check passes, ended.
			runs := readLog(t, log)
			session := []string{"swrk", "VERSION", "FEATURE_CHECK"}
			after := []string{"CHECK"}
			for _, n := range cli {
				after = append(after, "feature:"+n)
				if tc.passes {
					after = append(after, "feature-done:"+n)
				}
			}
			slices.Sort(after)
			if len(runs) < len(session) || !slices.Equal(runs[:len(session)], session) || !slices.Equal(slices.Sorted(slices.Values(runs[len(session):])), after) {
				t.Errorf("criu runs %q; want %q, then %q in any order", runs, session, after)
			}
		})
	}
}
