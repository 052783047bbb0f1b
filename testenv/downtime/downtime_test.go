package downtime

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

func TestFreezeAndResumed(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	r := func(ms, src, pid, n int) Reading { return Reading{At: at(ms), Source: src, PID: pid, N: n} }
	tests := []struct {
		name     string
		rs       []Reading
		on       func(Reading) bool
		from, to time.Time
		freeze   int // ms of the reading before the freeze; -1: none
		resumed  int // ms of the first advance on B; -1: none
	}{
		{
			// A pod checkpoint: A pauses (frozen), thaws and counts on
			// until deleted; B restores the count it froze at.
			name: "thawed and counting on",
			rs: []Reading{r(0, 0, 10, 1), r(20, 0, 10, 2), r(40, 0, 10, 3), r(300, 0, 10, 4), r(320, 0, 10, 5),
				r(900, 1, 20, 3), r(960, 1, 20, 4), r(1000, 0, 10, 40)},
			// The window is the checkpoint's, from its start to the thaw.
			on: OnSource(0), from: at(10), to: at(290), freeze: 40, resumed: 960,
		},
		{
			// podman stops the container it checkpoints: the last
			// reading on A is the freeze.
			name: "stopped for good",
			rs: []Reading{r(0, 0, 10, 1), r(20, 0, 10, 2), r(40, 0, 10, 3),
				r(900, 0, 20, 3), r(930, 0, 20, 4)},
			on: OnPID(10), from: at(10), to: at(500), freeze: 40, resumed: 930,
		},
		{
			name: "B's first reading already past the freeze",
			rs: []Reading{r(0, 0, 10, 1), r(20, 0, 10, 2), r(400, 0, 10, 3), r(420, 0, 10, 4),
				r(900, 1, 20, 4)},
			on: OnSource(0), from: at(10), to: at(420), freeze: 20, resumed: 900,
		},
		{
			name: "nothing on B",
			rs:   []Reading{r(0, 0, 10, 1), r(20, 0, 10, 2), r(400, 0, 10, 3)},
			on:   OnSource(0), from: at(0), to: at(400), freeze: 20, resumed: -1,
		},
		{
			name: "no reading on A",
			rs:   []Reading{r(900, 1, 20, 3)},
			on:   OnSource(0), from: at(0), to: at(400), freeze: -1, resumed: -1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, ok := Freeze(tt.rs, tt.on, tt.from, tt.to)
			if tt.freeze < 0 {
				if ok {
					t.Fatalf("Freeze = %+v, want none", f)
				}
				return
			}
			if !ok || !f.At.Equal(at(tt.freeze)) {
				t.Fatalf("Freeze = %+v, %v; want the reading at %d ms", f, ok, tt.freeze)
			}
			_, res, ok := Resumed(tt.rs, tt.on, f.N)
			if tt.resumed < 0 {
				if ok {
					t.Fatalf("Resumed = %+v, want none", res)
				}
				return
			}
			if !ok || !res.At.Equal(at(tt.resumed)) {
				t.Fatalf("Resumed = %+v, %v; want the reading at %d ms", res, ok, tt.resumed)
			}
		})
	}
}

func TestSizes(t *testing.T) {
	const env = "NODESHIM_DOWNTIME_TEST_MIB"
	for _, tt := range []struct {
		name, value string
		want        []int
		fails       bool
	}{
		{name: "unset", value: "", want: []int{64, 1024}},
		{name: "one", value: "256", want: []int{256}},
		{name: "list", value: "8, 16", want: []int{8, 16}},
		{name: "zero", value: "0", fails: true},
		{name: "word", value: "64,big", fails: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(env, tt.value)
			got, err := Sizes(env, 64, 1024)
			if (err != nil) != tt.fails || !slices.Equal(got, tt.want) {
				t.Fatalf("Sizes(%q) = %v, %v", tt.value, got, err)
			}
		})
	}
}

// TestCountingAndAnon reads a fake /proc and cgroup tree: the process
// whose root holds the counter is found, the pause process is not.
func TestCountingAndAnon(t *testing.T) {
	proc, cg := t.TempDir(), t.TempDir()
	mk := func(pid int, anonKB int, counts bool) {
		dir := filepath.Join(proc, strconv.Itoa(pid))
		if err := os.MkdirAll(filepath.Join(dir, "root"), 0o755); err != nil {
			t.Fatal(err)
		}
		status := "Name:\tsh\nRssAnon:\t" + strconv.Itoa(anonKB) + " kB\n"
		if err := os.WriteFile(filepath.Join(dir, "status"), []byte(status), 0o644); err != nil {
			t.Fatal(err)
		}
		if counts {
			if err := os.WriteFile(filepath.Join(dir, "root", CountFile), []byte("7\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk(100, 1, false) // pause
	mk(200, 1024, true)
	mk(201, 2048, true)
	for dir, procs := range map[string]string{
		"pod1/pause": "100\n", "pod1/work": "201\n200\n",
	} {
		if err := os.MkdirAll(filepath.Join(cg, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cg, dir, "cgroup.procs"), []byte(procs), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pids, err := Counting(proc, cg)
	if err != nil || !slices.Equal(pids, []int{200, 201}) {
		t.Fatalf("Counting = %v, %v; want [200 201]", pids, err)
	}
	if got := InCgroup(proc, cg)(); got != 200 {
		t.Errorf("InCgroup = %d, want 200", got)
	}
	if anon, err := Anon(proc, pids...); err != nil || anon != 3072<<10 {
		t.Errorf("Anon = %d, %v; want %d", anon, err, 3072<<10)
	}
	if pids, err := Counting(proc, filepath.Join(cg, "gone")); err != nil || len(pids) != 0 {
		t.Errorf("Counting of a missing tree = %v, %v", pids, err)
	}
}
