package criu

import (
	"bytes"
	"os"
	"path/filepath"
	"time"
)

// freezePoll is how often preFreeze reads the freezer's state. CRIU polls
// every 100 ms (seize.c, freeze_processes), so a container it freezes
// itself stays stopped for at least 100 ms before the dump even starts:
// the cgroup v1 freezer is still FREEZING when it is first read back.
const freezePoll = time.Millisecond

// preFreeze freezes the freezer cgroup dir (cgroup v1 freezer.state, or
// v2 cgroup.freeze) and waits, reading its state every freezePoll, until
// every task in it is frozen, at most limit. CRIU then finds the cgroup
// frozen, seizes the tasks without freezing them again and leaves the
// cgroup frozen after the dump, for the caller to thaw. If the cgroup is
// not frozen within limit, preFreeze thaws it and reports false, and CRIU
// freezes it the usual way.
func preFreeze(dir string, limit time.Duration) (frozenAt time.Time, ok bool) {
	v1 := filepath.Join(dir, "freezer.state")
	state, want, done := v1, "FROZEN", []byte("FROZEN")
	if _, err := os.Stat(v1); err != nil {
		state, want, done = filepath.Join(dir, "cgroup.freeze"), "1", []byte("frozen 1")
	}
	if err := os.WriteFile(state, []byte(want), 0); err != nil {
		return time.Time{}, false
	}
	read := state
	if want == "1" {
		read = filepath.Join(dir, "cgroup.events")
	}
	deadline := time.Now().Add(limit)
	for {
		if b, err := os.ReadFile(read); err == nil && bytes.Contains(b, done) {
			return time.Now(), true
		}
		if time.Now().After(deadline) {
			_ = thawCgroup(dir)
			return time.Time{}, false
		}
		time.Sleep(freezePoll)
	}
}
