package retention

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/criu/workentry"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

// envPruneDir makes the test binary a prune of that directory that stops
// after envPruneStop removals (0: never) and waits to be killed.
const (
	envPruneDir  = "NODESHIM_TEST_PRUNE_DIR"
	envPruneStop = "NODESHIM_TEST_PRUNE_STOP"
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(testworkload.EnvKind) == "count":
		testworkload.RunCounter(os.Getenv(testworkload.EnvDir), os.Getenv(testworkload.EnvMiB), false)
		return
	case os.Getenv(envPruneDir) != "":
		runPrune(os.Getenv(envPruneDir), os.Getenv(envPruneStop))
		return
	}
	goleak.VerifyTestMain(m)
}

// runPrune keeps one archive per container in dir, writing dir/../pruning
// after the stop-th removal and then waiting to be killed.
func runPrune(dir, stop string) {
	n, _ := strconv.Atoi(stop)
	removed := 0
	_, err := Apply(dir, Policy{MaxPerContainer: 1}, time.Now(), ApplyOptions{Removed: func(Removal) {
		removed++
		if removed == n {
			_ = os.WriteFile(filepath.Join(filepath.Dir(dir), "pruning"), nil, 0o600)
			select {}
		}
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// realArchive checkpoints a counter touching mib MiB with CRIU once and
// returns the archive's path: the archives of these tests are copies of
// it under the names of other times.
func realArchive(t *testing.T, mib int) string {
	t.Helper()
	testutil.RequireRoot(t)
	bin := criutest.RequireChecked(t)
	pid, _ := testworkload.Start(t, "count", mib)
	tg, err := criu.PIDTarget("/proc", pid, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	res, err := criu.Checkpoint(t.Context(), tg, criu.Options{Binary: bin, ArchiveDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return res.Path
}

// populate copies src into dir as archives of containers taken one
// minute apart from t0, n of each, and returns their names oldest first.
func populate(t *testing.T, src, dir string, containers []string, n int) []string {
	t.Helper()
	var names []string
	for i := range n {
		for _, c := range containers {
			at := t0.Add(time.Duration(i) * time.Minute)
			name := "checkpoint-" + c + "-" + at.Format(time.RFC3339) + ".tar"
			copyFile(t, src, filepath.Join(dir, name))
			names = append(names, name)
		}
	}
	return names
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func digest(t *testing.T, p string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func names(list []Archive) []string {
	var out []string
	for _, a := range list {
		out = append(out, a.Name)
	}
	slices.Sort(out)
	return out
}

// TestApplyRealArchives applies each limit to copies of a real archive.
func TestApplyRealArchives(t *testing.T) {
	src := realArchive(t, 1)
	fi, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	size := fi.Size()
	// Sorted: within a minute, archives are oldest first by name.
	containers := []string{"db-0_prod-pg", "web-0_default-app"}
	tests := []struct {
		name string
		p    Policy
		now  time.Time
		keep func(names []string) []string // names oldest first, two containers interleaved
	}{
		{"count", Policy{MaxPerContainer: 2}, t0, func(n []string) []string { return n[len(n)-4:] }},
		{"bytes", Policy{MaxBytes: 3*size + size/2}, t0, func(n []string) []string { return n[len(n)-3:] }},
		{"age", Policy{MaxAge: 90 * time.Second}, t0.Add(4 * time.Minute), func(n []string) []string { return n[len(n)-4:] }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			all := populate(t, src, dir, containers, 5)
			var logged []Removal
			res, err := Apply(dir, tt.p, tt.now, ApplyOptions{Removed: func(r Removal) { logged = append(logged, r) }})
			if err != nil {
				t.Fatal(err)
			}
			want := slices.Sorted(slices.Values(tt.keep(all)))
			if got := names(res.Kept); !slices.Equal(got, want) {
				t.Errorf("kept %v, want %v", got, want)
			}
			left, err := List(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(left); !slices.Equal(got, want) {
				t.Errorf("left in %s: %v, want %v", dir, got, want)
			}
			if len(logged) != len(all)-len(want) || len(res.Removed) != len(logged) {
				t.Errorf("%d removals reported, %d logged, want %d", len(res.Removed), len(logged), len(all)-len(want))
			}
			for _, a := range left {
				f, err := os.Open(filepath.Join(dir, a.Name))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := criu.ValidateArchive(f); err != nil {
					t.Errorf("%s: %v", a.Name, err)
				}
				f.Close()
			}
			if ents, _ := os.ReadDir(filepath.Join(dir, TrashDir)); len(ents) != 0 {
				t.Errorf("trash not empty: %v", ents)
			}
		})
	}
}

// TestHeldArchiveIsKept: an archive a reader holds (Hold) survives the
// prune that would remove it, and goes at the next prune once released;
// Hold fails on an archive being removed.
func TestHeldArchiveIsKept(t *testing.T) {
	src := realArchive(t, 1)
	dir := t.TempDir()
	all := populate(t, src, dir, []string{"web-0_default-app"}, 3)
	release, err := Hold(filepath.Join(dir, all[0]))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Apply(dir, Policy{MaxPerContainer: 1}, t0, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Skipped) != 1 || res.Skipped[0].Name != all[0] || len(res.Removed) != 1 || res.Removed[0].Name != all[1] {
		t.Errorf("removed %+v, skipped %+v: want %s removed, %s skipped", res.Removed, res.Skipped, all[1], all[0])
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if res, err = Apply(dir, Policy{MaxPerContainer: 1}, t0, ApplyOptions{}); err != nil || len(res.Removed) != 1 || res.Removed[0].Name != all[0] {
		t.Errorf("after release: removed %+v, %v; want %s", res.Removed, err, all[0])
	}
}

// TestConcurrentApply: prunes racing over one directory remove each
// archive once and leave exactly what one prune would.
func TestConcurrentApply(t *testing.T) {
	src := realArchive(t, 1)
	dir := t.TempDir()
	all := populate(t, src, dir, []string{"web-0_default-app", "db-0_prod-pg"}, 6)
	var mu sync.Mutex
	var removed []string
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := Apply(dir, Policy{MaxPerContainer: 2}, t0, ApplyOptions{Removed: func(r Removal) {
				mu.Lock()
				removed = append(removed, r.Name)
				mu.Unlock()
			}}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	slices.Sort(removed)
	if want := slices.Sorted(slices.Values(all[:len(all)-4])); !slices.Equal(removed, want) {
		t.Errorf("removed %v, want each of %v once", removed, want)
	}
	left, _ := List(dir)
	if want := slices.Sorted(slices.Values(all[len(all)-4:])); !slices.Equal(names(left), want) {
		t.Errorf("left %v, want %v", names(left), want)
	}
}

// TestKillMidPrune runs a prune in a child process and SIGKILLs it: at a
// removal's end, and at moments spread over the prune (a kill can then
// land between an archive's rename into the trash and its unlink). Every
// archive is whole under its name, or in the trash, or gone; the next
// Apply, as the next start does, empties the trash and finishes the job.
func TestKillMidPrune(t *testing.T) {
	src := realArchive(t, 8)
	want := digest(t, src)
	for _, tc := range []struct {
		name  string
		stop  int
		delay time.Duration
	}{
		{"after the third removal", 3, 0},
		{"at 0ms", 0, 0},
		{"at 2ms", 0, 2 * time.Millisecond},
		{"at 5ms", 0, 5 * time.Millisecond},
		{"at 10ms", 0, 10 * time.Millisecond},
		{"at 20ms", 0, 20 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dir := filepath.Join(base, "checkpoints")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			all := populate(t, src, dir, []string{"web-0_default-app"}, 12)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), envPruneDir+"="+dir, envPruneStop+"="+strconv.Itoa(tc.stop))
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if tc.stop > 0 {
				for {
					if _, err := os.Stat(filepath.Join(base, "pruning")); err == nil {
						break
					}
					time.Sleep(time.Millisecond)
				}
			} else {
				time.Sleep(tc.delay)
			}
			_ = cmd.Process.Signal(syscall.SIGKILL)
			err := cmd.Wait()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatal(err)
			}
			// The state a killed prune leaves: nothing partial.
			left, err := List(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range left {
				if digest(t, filepath.Join(dir, a.Name)) != want {
					t.Errorf("%s changed by the killed prune", a.Name)
				}
			}
			trash, _ := os.ReadDir(filepath.Join(dir, TrashDir))
			if len(trash) > 1 {
				t.Errorf("%d archives in the trash, want at most the one being removed", len(trash))
			}
			t.Logf("killed with %d archives left, %d in the trash", len(left), len(trash))
			if tc.stop > 0 && len(left) != len(all)-tc.stop {
				t.Errorf("%d archives left after %d removals, want %d", len(left), tc.stop, len(all)-tc.stop)
			}
			// The next start.
			res, err := Apply(dir, Policy{MaxPerContainer: 1}, t0, ApplyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Swept) != len(trash) {
				t.Errorf("swept %v, want the %d in the trash", res.Swept, len(trash))
			}
			if got := names(res.Kept); !slices.Equal(got, all[len(all)-1:]) {
				t.Errorf("kept %v, want %v", got, all[len(all)-1:])
			}
			if ents, _ := os.ReadDir(filepath.Join(dir, TrashDir)); len(ents) != 0 {
				t.Errorf("trash not empty after the next start: %v", ents)
			}
			if digest(t, filepath.Join(dir, all[len(all)-1])) != want {
				t.Error("the archive kept is not whole")
			}
		})
	}
}

// TestSweepFinishesARemoval: the state a kill between Remove's rename and
// its unlink leaves (the archive in the trash) is finished by the next
// Apply, and never listed as an archive meanwhile.
func TestSweepFinishesARemoval(t *testing.T) {
	src := realArchive(t, 1)
	dir := t.TempDir()
	all := populate(t, src, dir, []string{"web-0_default-app"}, 3)
	if err := os.Mkdir(filepath.Join(dir, TrashDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, all[0]), filepath.Join(dir, TrashDir, all[0])); err != nil {
		t.Fatal(err)
	}
	if left, _ := List(dir); !slices.Equal(names(left), all[1:]) {
		t.Errorf("listed %v, want %v", names(left), all[1:])
	}
	res, err := Apply(dir, Policy{}, t0, ApplyOptions{DryRun: true})
	if err != nil || len(res.Swept) != 0 || len(res.Removed) != 0 {
		t.Errorf("dry run: %+v, %v; want nothing swept or removed", res, err)
	}
	res, err = Apply(dir, Policy{}, t0, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Swept, all[:1]) || !slices.Equal(names(res.Kept), all[1:]) {
		t.Errorf("swept %v kept %v, want %v and %v", res.Swept, names(res.Kept), all[:1], all[1:])
	}
}

// TestRemoveTakesTheSignature: an archive's signature file is removed
// with it, and is never listed as an archive; another archive's stays.
func TestRemoveTakesTheSignature(t *testing.T) {
	if SignatureSuffix != seal.SignatureSuffix {
		t.Fatalf("retention removes %q files, seal writes %q", SignatureSuffix, seal.SignatureSuffix)
	}
	dir := t.TempDir()
	all := []string{"checkpoint-web-0_default-app-2026-01-01T00:00:00Z.tar", "checkpoint-web-0_default-app-2026-01-02T00:00:00Z.tar"}
	for _, n := range all {
		for _, f := range []string{n, n + seal.SignatureSuffix} {
			if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	if left, _ := List(dir); !slices.Equal(names(left), all) {
		t.Fatalf("listed %v, want %v", names(left), all)
	}
	if err := Remove(dir, all[0]); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{all[0], all[0] + seal.SignatureSuffix, filepath.Join(TrashDir, all[0]+seal.SignatureSuffix)} {
		if _, err := os.Lstat(filepath.Join(dir, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s outlived its archive's removal: %v", f, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, all[1]+seal.SignatureSuffix)); err != nil {
		t.Errorf("the other archive's signature: %v", err)
	}
}

// List is the archives of Scan, for the tests that look at nothing else.
func List(dir string) ([]Archive, error) {
	l, err := Scan(dir, workentry.Owners{})
	return l.Archives, err
}
