package main

import (
	"math"
	"runtime/debug"
	"testing"
)

func TestTuneGarbageCollector(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	const noLimit = math.MaxInt64
	tests := []struct {
		args    []string
		percent int
		limit   int64
	}{
		{[]string{"report"}, -1, shortLivedMemoryLimit},
		{[]string{"report", "-o", "json", "--cache-dir", ""}, -1, shortLivedMemoryLimit},
		{[]string{"serve", "--root-dir", "/x"}, longLivedGOGC, noLimit},
		{[]string{"version"}, 100, noLimit},
		{[]string{"checkpoint", "--help"}, 100, noLimit},
		{[]string{"no-such-command"}, 100, noLimit},
	}
	for _, tt := range tests {
		prevPercent := debug.SetGCPercent(100)
		prevLimit := debug.SetMemoryLimit(noLimit)
		tuneGarbageCollector(newRootCommand(), tt.args)
		percent := debug.SetGCPercent(prevPercent)
		limit := debug.SetMemoryLimit(prevLimit)
		if percent != tt.percent || limit != tt.limit {
			t.Errorf("%v: GC percent %d, memory limit %d; want %d, %d", tt.args, percent, limit, tt.percent, tt.limit)
		}
	}
	// GOGC set leaves the collector alone; GOMEMLIMIT set leaves a report's
	// alone (it needs its own limit) but not serve's pace.
	for _, tc := range []struct {
		env, cmd string
		percent  int
	}{
		{"GOGC", "serve", 100},
		{"GOGC", "report", 100},
		{"GOMEMLIMIT", "serve", longLivedGOGC},
		{"GOMEMLIMIT", "report", 100},
	} {
		t.Run(tc.cmd+" with "+tc.env, func(t *testing.T) {
			t.Setenv(tc.env, "50")
			prevPercent := debug.SetGCPercent(100)
			prevLimit := debug.SetMemoryLimit(noLimit)
			tuneGarbageCollector(newRootCommand(), []string{tc.cmd})
			limit := debug.SetMemoryLimit(prevLimit)
			if percent := debug.SetGCPercent(prevPercent); percent != tc.percent || limit != noLimit {
				t.Errorf("%s with %s set: GC percent %d, memory limit %d; want %d, no limit", tc.cmd, tc.env, percent, limit, tc.percent)
			}
		})
	}
}
