package testworkload

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if os.Getenv(EnvKind) == "count" {
		RunCounter(os.Getenv(EnvDir), os.Getenv(EnvMiB), false)
		return
	}
	os.Exit(m.Run())
}

// TestCounterLifecycle starts a counter, sees it count from 1, kills it and
// sees it gone.
func TestCounterLifecycle(t *testing.T) {
	pid, dir := Start(t, "count", 1)
	if pid <= 0 || pid == os.Getpid() {
		t.Fatalf("workload pid %d", pid)
	}
	AssertRunning(t, pid, dir)
	c := WaitCount(t, dir, 5)
	for i, n := range c {
		if n != i+1 {
			t.Fatalf("counts %v do not run 1, 2, 3, ...", c)
		}
	}
	Kill(t, pid)
	if st, _, ok := procState(t, pid); ok && st != 'X' {
		t.Fatalf("pid %d still there (state %q) after Kill", pid, st)
	}
}
