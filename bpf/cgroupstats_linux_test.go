package bpf

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// testCgroupStats loads the pass with the running kernel's CONFIG_HZ, or
// skips where cgroup iterators are missing.
func testCgroupStats(t testing.TB, capacity int) *CgroupStats {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/sys/kernel/btf/vmlinux")
	hz := kernelHZ(t)
	c, err := OpenCgroupStats(CgroupStatsOptions{HZ: hz, Capacity: capacity})
	testutil.SkipIfNotSupported(t, err)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func kernelHZ(t testing.TB) int {
	t.Helper()
	cfg, err := kernel.RunningConfig(kernel.DefaultHost())
	if err != nil {
		t.Fatalf("kernel config: %v", err)
	}
	hz, err := cfg.HZ()
	if err != nil {
		t.Fatal(err)
	}
	return hz
}

// testCgroupTree makes dir/a, dir/a/x, dir/b under a new cgroup below the
// cgroup2 mount and returns the new cgroup.
func testCgroupTree(t *testing.T) (cg2, dir string) {
	t.Helper()
	cg2, err := cgroup.MountUnder("/sys")
	if err != nil {
		t.Fatal(err)
	}
	dir, err = os.MkdirTemp(cg2, "nodeshim-pass-")
	if err != nil {
		t.Fatal(err)
	}
	subs := []string{"a", "a/x", "a/x/deep", "b"}
	for _, s := range subs {
		if err := os.Mkdir(filepath.Join(dir, s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for i := len(subs) - 1; i >= 0; i-- {
			os.Remove(filepath.Join(dir, subs[i]))
		}
		os.Remove(dir)
	})
	return cg2, dir
}

func inode(t testing.TB, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func runPass(t testing.TB, c *CgroupStats, dir string, depth int) []cgroup.PassStats {
	t.Helper()
	var out []cgroup.PassStats
	if err := c.Pass(dir, depth, func(s *cgroup.PassStats) { out = append(out, *s) }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCgroupStatsPassWalk: a pass visits the root and its descendants in
// pre-order down to the depth asked for, each with its directory's inode
// as id and its level, and grows its map when the subtree outgrows it.
func TestCgroupStatsPassWalk(t *testing.T) {
	c := testCgroupStats(t, 2)
	cg2, dir := testCgroupTree(t)
	base := strings.Count(strings.TrimPrefix(dir, cg2), "/")
	for _, tc := range []struct {
		depth int
		want  []string
	}{
		{0, []string{""}},
		{1, []string{"", "a", "b"}},
		{2, []string{"", "a", "a/x", "b"}},
		{5, []string{"", "a", "a/x", "a/x/deep", "b"}},
	} {
		t.Run(fmt.Sprintf("depth=%d", tc.depth), func(t *testing.T) {
			got := runPass(t, c, dir, tc.depth)
			if len(got) != len(tc.want) {
				t.Fatalf("pass of %s at depth %d: %d cgroups, want %d (%v)", dir, tc.depth, len(got), len(tc.want), tc.want)
			}
			for i, rel := range tc.want {
				p := filepath.Join(dir, rel)
				if got[i].ID != inode(t, p) {
					t.Errorf("cgroup %d: id %d, want %s's inode %d", i, got[i].ID, p, inode(t, p))
				}
				wantLevel := base
				if rel != "" {
					wantLevel += strings.Count(rel, "/") + 1
				}
				if got[i].Level != wantLevel {
					t.Errorf("%s: level %d, want %d", p, got[i].Level, wantLevel)
				}
			}
		})
	}
	if c.capacity < 5 {
		t.Errorf("capacity %d after a pass of 5 cgroups", c.capacity)
	}
}

func TestCgroupStatsPassErrors(t *testing.T) {
	c := testCgroupStats(t, 0)
	cg2, err := cgroup.MountUnder("/sys")
	if err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(cg2, "nodeshim-no-such-cgroup")
	if err := c.Pass(gone, 1, func(*cgroup.PassStats) {}); !errors.Is(err, cgroup.ErrVanished) || !strings.Contains(err.Error(), gone) {
		t.Errorf("pass of a missing cgroup: %v, want ErrVanished naming %s", err, gone)
	}
	if err := c.Pass(t.TempDir(), 1, func(*cgroup.PassStats) {}); err == nil || !strings.Contains(err.Error(), "create a cgroup iterator") {
		t.Errorf("pass of a directory that is not a cgroup: %v", err)
	}
	if err := c.Pass(cg2, -1, func(*cgroup.PassStats) {}); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("negative depth: %v", err)
	}
	if _, err := OpenCgroupStats(CgroupStatsOptions{HZ: 123}); err == nil || !strings.Contains(err.Error(), "CONFIG_HZ=123") {
		t.Errorf("HZ 123: %v", err)
	}
	if _, err := OpenCgroupStats(CgroupStatsOptions{}); err == nil || !strings.Contains(err.Error(), "neither CONFIG_HZ") {
		t.Errorf("no HZ and nothing to measure it over: %v", err)
	}
	if _, err := OpenCgroupStats(CgroupStatsOptions{Calibrate: gone}); !errors.Is(err, cgroup.ErrVanished) {
		t.Errorf("measuring HZ over a missing cgroup: %v", err)
	}
	c.Close()
	if err := c.Pass(cg2, 0, func(*cgroup.PassStats) {}); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("pass after Close: %v", err)
	}
}

// TestCgroupStatsMeasuresHZ: without CONFIG_HZ, the pass counts the
// kernel's jiffies and finds the same frequency as the kernel config.
func TestCgroupStatsMeasuresHZ(t *testing.T) {
	want := kernelHZ(t)
	cg2, err := cgroup.MountUnder("/sys")
	if err != nil {
		t.Fatal(err)
	}
	testutil.RequireRoot(t)
	c, err := OpenCgroupStats(CgroupStatsOptions{Calibrate: cg2})
	testutil.SkipIfNotSupported(t, err)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if hz, measured := c.HZ(); hz != want || !measured {
		t.Errorf("measured CONFIG_HZ %d (measured %v), the kernel config says %d", hz, measured, want)
	}
	if d := c.Describe(); !strings.Contains(d, fmt.Sprintf("CONFIG_HZ %d measured", want)) {
		t.Errorf("Describe() = %q", d)
	}
}

func TestHZOf(t *testing.T) {
	for _, tc := range []struct {
		jiffies uint64
		elapsed time.Duration
		want    int
		err     string
	}{
		{25, 250 * time.Millisecond, 100, ""},
		{63, 250 * time.Millisecond, 250, ""},
		{62, 251 * time.Millisecond, 250, ""},
		{75, 250 * time.Millisecond, 300, ""},
		{76, 252 * time.Millisecond, 300, ""},
		{250, 250 * time.Millisecond, 1000, ""},
		{69, 250 * time.Millisecond, 0, "match no CONFIG_HZ"},
		{0, 250 * time.Millisecond, 0, "match no CONFIG_HZ"},
		{10, 0, 0, "no time elapsed"},
	} {
		got, err := hzOf(tc.jiffies, tc.elapsed)
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("hzOf(%d, %s) = %d, %v; want %d, %q", tc.jiffies, tc.elapsed, got, err, tc.want, tc.err)
		}
	}
}

// busyIn starts n busy loops in the cgroup dir and returns their stop.
func busyIn(t *testing.T, dir string, n int) (stop func()) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var cmds []*exec.Cmd
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	stop = func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
		cmds = nil
	}
	t.Cleanup(stop)
	return stop
}

// readPressure reads dir's three *.pressure files like the file path does.
func readPressure(t *testing.T, dir string) [len(cgroup.Resources)]cgroup.Pressure {
	t.Helper()
	var st cgroup.Stats
	if err := cgroup.NewReader().Read(dir, cgroup.StatPressure, &st); err != nil {
		t.Fatal(err)
	}
	for i, p := range st.Pressure {
		if p.Err != nil {
			t.Fatalf("%s: %s: %v", dir, cgroup.Resources[i].PressureFile(), p.Err)
		}
	}
	return st.Pressure
}

// TestCgroupStatsPassPSIMatchesFiles: the pass's PSI equals what the
// *.pressure files print. A cgroup stalls on CPU (more busy loops than
// CPUs), then goes idle: the kernel stops averaging it, and the pass must
// apply the decay the file read applies. The pass runs first, since a file
// read updates the group's averages.
func TestCgroupStatsPassPSIMatchesFiles(t *testing.T) {
	c := testCgroupStats(t, 0)
	_, dir := testCgroupTree(t)
	stalled := filepath.Join(dir, "a")
	stop := busyIn(t, stalled, 2*numCPU(t)+1)
	time.Sleep(3 * time.Second)

	find := func(rows []cgroup.PassStats, id uint64) cgroup.PassStats {
		for _, r := range rows {
			if r.ID == id {
				return r
			}
		}
		t.Fatalf("pass has no cgroup %d", id)
		return cgroup.PassStats{}
	}
	id := inode(t, stalled)

	// While it stalls: the averages are the kernel's, and the totals lag
	// the file's by at most one averaging period.
	rows := runPass(t, c, dir, 2)
	file := readPressure(t, stalled)
	busy := find(rows, id)
	cpu := 0 // cgroup.Resources[0] is CPU
	if busy.Pressure[cpu].Err != nil {
		t.Fatal(busy.Pressure[cpu].Err)
	}
	if busy.Pressure[cpu].PSI.Some.Total == 0 || file[cpu].PSI.Some.Total == 0 {
		t.Fatalf("no CPU stall in %s: pass %+v, file %+v", stalled, busy.Pressure[cpu].PSI, file[cpu].PSI)
	}
	lag := file[cpu].PSI.Some.Total - busy.Pressure[cpu].PSI.Some.Total
	if busy.Pressure[cpu].PSI.Some.Total > file[cpu].PSI.Some.Total || lag > uint64(3*c.period/time.Microsecond) {
		t.Errorf("busy %s: pass total %d µs, file total %d µs: want the pass at most one period behind", stalled,
			busy.Pressure[cpu].PSI.Some.Total, file[cpu].PSI.Some.Total)
	}
	t.Logf("busy: pass %+v, file %+v", busy.Pressure[cpu].PSI.Some, file[cpu].PSI.Some)

	// Idle for five periods: the kernel's averaging has stopped and the
	// pass decays the averages as psi_show does. A period boundary between
	// the pass and the file read changes the file's averages: retry then.
	stop()
	time.Sleep(5 * c.period)
	var last string
	for attempt := 0; attempt < 3; attempt++ {
		rows := runPass(t, c, dir, 2)
		file := readPressure(t, stalled)
		got := find(rows, id)
		match := true
		for i := range file {
			if got.Pressure[i].Err != nil || got.Pressure[i].PSI != file[i].PSI {
				match = false
			}
		}
		if match {
			raw := rawRecord(t, c, id)
			t.Logf("idle: pass = file = %+v; the kernel's own avg10 %d, avg_total %d, last %d, next %d, pass at %d",
				file[cpu].PSI.Some, raw.PsiAvg[12], raw.PsiAvgTotal[4], raw.PsiAvgLastUpdate, raw.PsiAvgNextUpdate, raw.NowNs)
			// The kernel last averaged the group more than a period
			// before its update was due: the pass applied missed
			// periods' decay, as the file read did.
			if raw.NowNs < raw.PsiAvgNextUpdate+uint64(c.period) {
				t.Errorf("idle %s: no averaging period was missed before the pass, the decay was not exercised", stalled)
			}
			if file[cpu].PSI.Some.Avg10 == 0 {
				t.Errorf("idle %s: avg10 already 0, the decay was not exercised", stalled)
			}
			return
		}
		last = fmt.Sprintf("pass %+v, file %+v", got.Pressure, file)
	}
	t.Errorf("idle %s: the pass's PSI differs from the files' in 3 attempts; last: %s", stalled, last)
}

// rawRecord returns the last pass's record of cgroup id.
func rawRecord(t *testing.T, c *CgroupStats, id uint64) cgroupstatsCgroupStat {
	t.Helper()
	const size = int(unsafe.Sizeof(cgroupstatsCgroupStat{}))
	for i := 0; i+size <= len(c.buf); i += size {
		if r := (*cgroupstatsCgroupStat)(unsafe.Pointer(&c.buf[i])); r.Id == id {
			return *r
		}
	}
	t.Fatalf("no record of cgroup %d", id)
	return cgroupstatsCgroupStat{}
}

func numCPU(t *testing.T) int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	return set.Count()
}

// TestCgroupStatsPassMemory: where the memory controller is enabled in a
// cgroup, the pass reads memory.current, memory.max and memory.events'
// oom_kill as the files print them; where it is not (this host's cgroup2
// has memory on a v1 hierarchy), the figures say so.
func TestCgroupStatsPassMemory(t *testing.T) {
	c := testCgroupStats(t, 0)
	cg2, dir := testCgroupTree(t)
	ctl, err := os.ReadFile(filepath.Join(cg2, "cgroup.subtree_control"))
	if err != nil {
		t.Fatal(err)
	}
	rows := runPass(t, c, dir, 2)
	if !strings.Contains(string(ctl), "memory") {
		for _, r := range rows {
			if !errors.Is(r.Memory.Err, cgroup.ErrMissing) {
				t.Errorf("cgroup %d: memory %+v without the memory controller, want ErrMissing", r.ID, r.Memory)
			}
		}
		return
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a", "memory.max"), []byte("104857600"), 0); err != nil {
		t.Fatal(err)
	}
	rows = runPass(t, c, dir, 1)
	for _, r := range rows {
		var p string
		for _, rel := range []string{"", "a", "b"} {
			if inode(t, filepath.Join(dir, rel)) == r.ID {
				p = filepath.Join(dir, rel)
			}
		}
		var st cgroup.Stats
		if err := cgroup.NewReader().Read(p, cgroup.StatMemory|cgroup.StatMemoryEvents, &st); err != nil {
			t.Fatal(err)
		}
		if st.Memory.Err != nil || r.Memory.Err != nil {
			t.Fatalf("%s: file %v, pass %v", p, st.Memory.Err, r.Memory.Err)
		}
		if r.Memory.Current != st.Memory.Current || r.Memory.Max != st.Memory.Max || r.OOMKill != st.MemoryEvents.OOMKill {
			t.Errorf("%s: pass current %d max %+v oom_kill %d, files %d %+v %d", p, r.Memory.Current, r.Memory.Max, r.OOMKill,
				st.Memory.Current, st.Memory.Max, st.MemoryEvents.OOMKill)
		}
	}
}

// TestCgroupStatLayout holds the Go record to the C one.
func TestCgroupStatLayout(t *testing.T) {
	if got := unsafe.Sizeof(cgroupstatsCgroupStat{}); got != 8*(2+6+6+18+2+3)+4+4 {
		t.Errorf("cgroup_stat is %d bytes", got)
	}
}
