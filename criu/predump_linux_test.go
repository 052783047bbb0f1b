package criu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/criu/archive"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/testenv/testutil"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

// criuRounds lays out work as CRIU leaves it after rounds pre-dump rounds
// and the dump: each round's directory with its images and, from the
// second on, a parent symlink to the round before; images with a parent
// symlink to the last round.
func criuRounds(t *testing.T, rounds int) (work, images string) {
	t.Helper()
	work = t.TempDir()
	images = filepath.Join(work, ImagesDir)
	if err := os.WriteFile(filepath.Join(work, DumpLog), []byte("log"), 0o600); err != nil {
		t.Fatal(err)
	}
	mk := func(dir, parent, tag string) {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"inventory.img", "pagemap-1.img", "pages-1.img"} {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(tag+f), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if parent != "" {
			if err := os.Symlink(parent, filepath.Join(dir, "parent")); err != nil {
				t.Fatal(err)
			}
		}
	}
	for n := 1; n <= rounds; n++ {
		parent := ""
		if n > 1 {
			parent = "../" + preDumpDir(n-1)
		}
		mk(filepath.Join(work, preDumpDir(n)), parent, preDumpDir(n))
	}
	mk(images, "../"+preDumpDir(rounds), "final")
	return work, images
}

// TestNestPreDumps: the rounds CRIU leaves beside the final images become
// checkpoint/parent, checkpoint/parent/parent, ... in the archive, which
// Validate accepts, with each round's own images and no symlink; a round
// whose parent is not CRIU's symlink is refused.
func TestNestPreDumps(t *testing.T) {
	for _, rounds := range []int{1, 2, 3} {
		work, images := criuRounds(t, rounds)
		if err := nestPreDumps(work, images, rounds); err != nil {
			t.Fatalf("%d rounds: %v", rounds, err)
		}
		var buf bytes.Buffer
		aw := archive.NewStreamWriter(t.Context(), &buf, nil, time.Second)
		meta := []archive.MetaFile{{Name: archive.ConfigDump, Data: []byte("{}")}, {Name: archive.SpecDump, Data: []byte("{}")}}
		if err := archive.WriteTree(aw, work, images, meta); err != nil {
			t.Fatal(err)
		}
		entries, err := archive.Validate(&buf)
		if err != nil {
			t.Fatalf("%d rounds: archive refused: %v", rounds, err)
		}
		got := map[string]byte{}
		for _, e := range entries {
			got[e.Name] = e.Type
			if e.Linkname != "" {
				t.Errorf("%d rounds: symlink %s -> %s in the archive", rounds, e.Name, e.Linkname)
			}
		}
		dir := ImagesDir
		for n := rounds; n >= 0; n-- {
			if n < rounds {
				dir += "/parent"
			}
			if _, ok := got[dir+"/pages-1.img"]; !ok {
				t.Errorf("%d rounds: no %s/pages-1.img in %v", rounds, dir, got)
			}
			want := "final"
			if n < rounds {
				want = preDumpDir(n + 1)
			}
			b, err := os.ReadFile(filepath.Join(work, dir, "pages-1.img"))
			if err != nil || !strings.HasPrefix(string(b), want) {
				t.Errorf("%d rounds: %s/pages-1.img holds %q (%v), want round %s's", rounds, dir, b, err, want)
			}
		}
		if _, ok := got[dir+"/parent"]; ok {
			t.Errorf("%d rounds: the first round has a parent", rounds)
		}
		for n := 1; n <= rounds; n++ {
			if _, err := os.Lstat(filepath.Join(work, preDumpDir(n))); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%d rounds: %s left in the work dir: %v", rounds, preDumpDir(n), err)
			}
		}
	}

	work, images := criuRounds(t, 2)
	// A round whose parent is a directory of its own, not the link CRIU
	// made, is not replaced.
	p := filepath.Join(work, preDumpDir(2), "parent")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := nestPreDumps(work, images, 2); err == nil || !strings.Contains(err.Error(), "not CRIU's parent symlink") {
		t.Errorf("nest over a parent directory: %v, want refused", err)
	}
}

// TestCheckpointPreDumpRefused: pre-dump rounds out of bounds or with a
// lazy checkpoint are invalid arguments; on a kernel without dirty-memory
// tracking (this host's: FACTS.md) pre-dump is not supported, named by
// its kernel feature. Each fails before CRIU touches the target: the
// target runs on, unfrozen and untraced, and nothing is left.
func TestCheckpointPreDumpRefused(t *testing.T) {
	bin := requireCriu(t)
	pid, dir := testworkload.Start(t, "count", 4)
	testworkload.WaitCount(t, dir, 5)
	tg := pidTarget(t, pid)
	cases := []struct {
		name    string
		opts    Options
		class   error
		message string
	}{
		{name: "negative", opts: Options{PreDump: -1}, class: errdefs.ErrInvalidArgument, message: "-1 pre-dump rounds"},
		{name: "too many", opts: Options{PreDump: MaxPreDump + 1}, class: errdefs.ErrInvalidArgument, message: "want 0 to 8"},
		{name: "with lazy", opts: Options{PreDump: 1, Lazy: &PageServer{Address: "127.0.0.1", Port: 1}}, class: errdefs.ErrInvalidArgument, message: "exclude each other"},
	}
	if !kernelTracksSoftDirty(t) {
		cases = append(cases, struct {
			name    string
			opts    Options
			class   error
			message string
		}{name: "no soft-dirty tracking", opts: Options{PreDump: 2}, class: errdefs.ErrNotSupported, message: "CONFIG_MEM_SOFT_DIRTY"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			o := tc.opts
			o.Binary, o.RootDir = bin, root
			_, err := Checkpoint(t.Context(), tg, o)
			if !errors.Is(err, tc.class) || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("err = %v, want %v naming %q", err, tc.class, tc.message)
			}
			if tc.class == errdefs.ErrNotSupported && (!errors.Is(err, ErrPreDumpUnsupported) || !strings.Contains(err.Error(), "Dirty tracking is OFF")) {
				t.Errorf("err = %v, want ErrPreDumpUnsupported with CRIU's message", err)
			}
			t.Logf("refused: %v", err)
			testworkload.AssertRunning(t, pid, dir)
			onlyArchives(t, filepath.Join(root, CheckpointsDir), 0)
		})
	}
}

// TestCheckpointPreDumpRoundTrip: where the kernel tracks dirty memory, a
// counter checkpointed after two pre-dump rounds runs on, and restored
// from the archive (its rounds under checkpoint/parent) continues from the
// checkpointed count. Where it does not, the refusal is
// TestCheckpointPreDumpRefused's and the round trip is the node suite's.
func TestCheckpointPreDumpRoundTrip(t *testing.T) {
	bin := requireCriu(t)
	if !kernelTracksSoftDirty(t) {
		if err := CheckPreDump(t.Context(), bin); !errors.Is(err, ErrPreDumpUnsupported) {
			t.Fatalf("CheckPreDump on a kernel without soft-dirty tracking: %v, want ErrPreDumpUnsupported", err)
		}
		return
	}
	if err := CheckPreDump(t.Context(), bin); err != nil {
		t.Fatalf("CheckPreDump on a kernel that tracks soft-dirty pages: %v", err)
	}
	pid, dir := testworkload.Start(t, "count", 16)
	before := testworkload.WaitCount(t, dir, 20)
	root := t.TempDir()
	tg := pidTarget(t, pid)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	res, err := Checkpoint(ctx, tg, Options{Binary: bin, RootDir: root, PreDump: 2})
	if err != nil {
		t.Fatal(err)
	}
	after := testworkload.Counts(t, dir)
	lo, hi := before[len(before)-1], after[len(after)-1]
	t.Logf("pre-dump 2: %d bytes, frozen %v, pages written while frozen %d", res.Size, res.Frozen, res.PagesWritten)
	f := mustOpen(t, res.Path)
	entries, err := archive.Validate(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var chain int
	for _, e := range entries {
		if strings.HasSuffix(e.Name, "/inventory.img") && strings.HasPrefix(e.Name, ImagesDir+"/parent") {
			chain++
		}
	}
	if chain != 2 {
		t.Errorf("archive holds %d pre-dump rounds under %s/parent, want 2", chain, ImagesDir)
	}
	testworkload.AssertRunning(t, pid, dir)
	testworkload.Kill(t, pid)
	stopped := testworkload.Counts(t, dir)
	rr, err := Restore(t.Context(), res.Path, RestoreOptions{Binary: bin, RootDir: root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testworkload.Kill(t, rr.Pid) })
	restored := testworkload.WaitCount(t, dir, len(stopped)+10)[len(stopped):]
	if first := restored[0]; first <= lo || first > hi+1 {
		t.Errorf("restored counter resumed at %d, want in (%d, %d]", first, lo, hi+1)
	}
}

// dirtyPercentPerSecond is how much of its memory the "dirty" workload
// rewrites each second: the working set that dirties ~5% a second.
const dirtyPercentPerSecond = 5

// runDirtier is the "dirty" workload: it touches mib MiB, writes its pid
// to dir/pid, then rewrites a byte in dirtyPercentPerSecond percent of its
// pages each second, in ten steps a second, walking through the memory.
func runDirtier(dir, mib string) {
	n, _ := strconv.Atoi(mib)
	mem := make([]byte, n<<20)
	page := os.Getpagesize()
	for i := 0; i < len(mem); i += page {
		mem[i] = 1
	}
	if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		os.Exit(3)
	}
	pages := len(mem) / page
	step := max(pages*dirtyPercentPerSecond/100/10, 1)
	next := 0
	for tick := time.NewTicker(100 * time.Millisecond); ; <-tick.C {
		for j := 0; j < step && pages > 0; j++ {
			mem[next*page]++
			next = (next + 1) % pages
		}
	}
}

// BenchmarkPreDump measures what pre-dump rounds save: the frozen time of
// a plain checkpoint against one after two pre-dump rounds, of a process
// of NODESHIM_PREDUMP_MIB MiB (default 1024) that rewrites 5% of its
// pages a second. frozen-ms is the dump's frozen time (CRIU's
// frozen_time); rounds-frozen-ms the pre-dump rounds' own frozen times
// together; total-ms the whole checkpoint, rounds included; frozen-pages
// the pages the dump wrote while frozen. It needs a kernel that
// tracks dirty memory (the node guest's; not this project's host), and is
// skipped, naming the feature, elsewhere.
func BenchmarkPreDump(b *testing.B) {
	bin := requireCriu(b)
	if err := CheckPreDump(b.Context(), bin); err != nil {
		testutil.Skip(b, "needs the kernel's dirty-memory tracking: %v", err)
	}
	mib := 1024
	if s := os.Getenv("NODESHIM_PREDUMP_MIB"); s != "" {
		var err error
		if mib, err = strconv.Atoi(s); err != nil || mib <= 0 {
			b.Fatalf("NODESHIM_PREDUMP_MIB=%q is not a size in MiB", s)
		}
	}
	for _, rounds := range []int{0, 2} {
		b.Run(fmt.Sprintf("%dMiB/pre-dump-%d", mib, rounds), func(b *testing.B) {
			pid, _ := testworkload.Start(b, "dirty", mib)
			tg, err := PIDTarget("/proc", pid, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			var frozen, roundsFrozen, total time.Duration
			var pages uint64
			for i := 0; i < b.N; i++ {
				res, err := Checkpoint(b.Context(), tg, Options{Binary: bin, RootDir: b.TempDir(), PreDump: rounds})
				if err != nil {
					b.Fatal(err)
				}
				frozen += res.Frozen
				roundsFrozen += res.PreDumpFrozen
				total += res.Total
				pages += res.PagesWritten
				b.StopTimer()
				if err := os.Remove(res.Path); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			n := float64(b.N)
			b.ReportMetric(float64(frozen.Milliseconds())/n, "frozen-ms")
			b.ReportMetric(float64(roundsFrozen.Milliseconds())/n, "rounds-frozen-ms")
			b.ReportMetric(float64(total.Milliseconds())/n, "total-ms")
			b.ReportMetric(float64(pages)/n, "frozen-pages")
		})
	}
}
