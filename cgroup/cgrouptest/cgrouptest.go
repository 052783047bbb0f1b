// Package cgrouptest holds what the tests of cgroup and of the policies
// above it (eviction) share: a recorded node's procfs and a clock moved
// by hand.
package cgrouptest

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Proc writes, under a new temp dir, the procfs files a node's available
// amounts are read from (meminfo with memFreeKB free and no page cache,
// pid_max, threads-max, loadavg) and returns its root.
func Proc(t testing.TB, memFreeKB string) string {
	t.Helper()
	proc := t.TempDir()
	for name, data := range map[string]string{
		"meminfo":                "MemTotal:       16384000 kB\nMemFree:         " + memFreeKB + " kB\nInactive(file):  0 kB\n",
		"sys/kernel/pid_max":     "4194304\n",
		"sys/kernel/threads-max": "126000\n",
		"loadavg":                "0.52 0.58 0.59 3/1206 12345\n",
	} {
		p := filepath.Join(proc, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return proc
}

// Clock is a time moved by hand, from 2026-01-02T03:04:05Z; not safe for
// concurrent use.
type Clock struct{ t time.Time }

// NewClock returns a Clock at 2026-01-02T03:04:05Z.
func NewClock() *Clock { return &Clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return c.t }

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) { c.t = c.t.Add(d) }
