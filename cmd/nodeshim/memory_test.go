package main

import (
	"runtime/debug"
	"testing"
)

func TestCollectGarbageLate(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	tests := []struct {
		args []string
		late bool
	}{
		{[]string{"report"}, true},
		{[]string{"report", "-o", "json", "--cache-dir", ""}, true},
		{[]string{"serve", "--root-dir", "/x"}, false},
		{[]string{"version"}, false},
		{[]string{"no-such-command"}, false},
	}
	for _, tt := range tests {
		prevPercent := debug.SetGCPercent(100)
		prevLimit := debug.SetMemoryLimit(-1)
		collectGarbageLate(newRootCommand(), tt.args)
		percent := debug.SetGCPercent(prevPercent)
		limit := debug.SetMemoryLimit(prevLimit)
		if late := percent == -1 && limit == shortLivedMemoryLimit; late != tt.late {
			t.Errorf("%v: GC percent %d, memory limit %d; want late collection %v", tt.args, percent, limit, tt.late)
		}
	}
}
