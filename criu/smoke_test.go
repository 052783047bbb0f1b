package criu

import (
	"testing"
	"time"
)

func TestSmoke(t *testing.T) {
	bin := requireCriu(t)
	pid, dir := startWorkload(t, "count", 1)
	waitCount(t, dir, 5)
	tg, err := PIDTarget("/proc", pid, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	res, err := Checkpoint(t.Context(), tg, Options{Binary: bin, RootDir: root})
	t.Logf("%+v %v", res, err)
	if err != nil {
		t.Fatal(err)
	}
	assertRunning(t, pid, dir)
	killAndWait(t, pid)
	rr, err := Restore(t.Context(), res.Path, RestoreOptions{Binary: bin, RootDir: root})
	t.Logf("%+v %v", rr, err)
	if err != nil {
		t.Fatal(err)
	}
	n := len(counts(t, dir))
	c := waitCount(t, dir, n+3)
	t.Log(c[n-3:])
	killAndWait(t, rr.Pid)
}
