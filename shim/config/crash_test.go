package config

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// The crash test runs the lifecycle in a child process (this test binary,
// re-executed with envCrashChild set) and kills it with SIGKILL, either at
// the n-th step of its disk writes (the child kills itself at the
// crash point, so every point between create, write, fsync, rename and
// directory fsync is hit) or after a random delay. After each kill the
// parent opens the state as a restarted shim would and checks it.
const envCrashChild = "NODESHIM_CONFIG_CRASH_CHILD"

// crashCycles is how many good / soak / bad / good rounds a child runs.
const crashCycles = 3

// crashChild is the child's main: args are state dir, source dir,
// generation base and crash point (0: never).
func crashChild() {
	args := strings.Split(os.Getenv(envCrashChild), "|")
	if len(args) != 4 {
		fmt.Println("bad args")
		os.Exit(2)
	}
	gen, _ := strconv.Atoi(args[2])
	crashAt, _ := strconv.Atoi(args[3])
	points := 0
	hook := func(string) {
		points++
		if points == crashAt {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	clk := clocktesting.NewFakeClock(t0.Add(time.Duration(gen) * time.Hour))
	c, err := Open(Options{StateDir: args[0], SourceDir: args[1], Clock: clk, Logger: quietLogger(), crashPoint: hook})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	step := func(files map[string]string) {
		if err := writeSourceErr(args[1], files); err != nil {
			fmt.Println("write source:", err)
			os.Exit(1)
		}
		if err := c.Sync(); err != nil {
			fmt.Println("sync:", err)
			os.Exit(1)
		}
	}
	for k := 0; k < crashCycles; k++ {
		g := gen + 10*k
		step(map[string]string{BaseFile: goodConfig(g + 1), "10-a.conf": "# empty drop-in\n"})
		clk.Step(DefaultSoakPeriod)
		if err := c.Sync(); err != nil {
			fmt.Println("sync:", err)
			os.Exit(1)
		}
		step(map[string]string{BaseFile: badUnknownField})
		step(map[string]string{BaseFile: goodConfig(g + 2)})
	}
	fmt.Printf("done %d\n", points)
	os.Exit(0)
}

// crashRun starts a child and lets it run until it exits or, when
// killAfter >= 0, until killAfter has passed since it said ready. It
// returns the child's last line and whether it was killed.
func crashRun(t *testing.T, state, source string, gen, crashAt int, killAfter time.Duration) (string, bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%d|%d", envCrashChild, state, source, gen, crashAt))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(out)
	first, _ := r.ReadString('\n')
	if killAfter >= 0 && first == "ready\n" {
		time.Sleep(killAfter)
		cmd.Process.Signal(syscall.SIGKILL)
	}
	rest, _ := io.ReadAll(r)
	err = cmd.Wait()
	last := strings.TrimSpace(first + string(rest))
	if i := strings.LastIndex(last, "\n"); i >= 0 {
		last = last[i+1:]
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return last, true
		}
		t.Fatalf("child failed: %v: %s", err, last)
	}
	if err != nil {
		t.Fatal(err)
	}
	return last, false
}

// lkgGen returns the generation number (the GenN feature gate) of a
// payload kept as a snapshot.
func lkgGen(t *testing.T, s *store, uid string) int {
	t.Helper()
	p, err := s.loadSnapshot(uid)
	if err != nil {
		t.Fatalf("last-known-good %s lost: %v", short(uid), err)
	}
	cfg, err := p.Load()
	if err != nil {
		t.Fatalf("last-known-good %s does not load: %v", short(uid), err)
	}
	for _, k := range cfg.Plugins.Expected {
		if n, err := strconv.Atoi(strings.TrimPrefix(k, "driver-")); err == nil {
			return n
		}
	}
	t.Fatalf("last-known-good %s has no generation: %+v", short(uid), cfg.Plugins.Expected)
	return 0
}

// checkRestart opens the state as a restarted shim and checks the
// invariants; it returns the generation of last-known-good (-1: none).
func checkRestart(t *testing.T, iter int, state, source string, prevLKG int) int {
	t.Helper()
	c, err := Open(Options{StateDir: state, SourceDir: source, Clock: clocktesting.NewFakeClock(t0), Logger: quietLogger()})
	if err != nil {
		t.Fatalf("iteration %d: restart: %v", iter, err)
	}
	st := c.Status()
	active := c.Active()
	if err := active.Validate(); err != nil {
		t.Fatalf("iteration %d: active config invalid: %v", iter, err)
	}
	same := func(a, b *SourceRef) bool { return (a == nil && b == nil) || (a != nil && b != nil && a.UID == b.UID) }
	if st.Error == "" && !same(st.Active, st.Assigned) {
		t.Fatalf("iteration %d: no error but active %s != assigned %s", iter, refUID(st.Active), refUID(st.Assigned))
	}
	if st.Error != "" && !same(st.Active, st.LastKnownGood) {
		t.Fatalf("iteration %d: error %q but active %s != last-known-good %s", iter, st.Error, refUID(st.Active), refUID(st.LastKnownGood))
	}
	if st.LastKnownGood != nil && st.Assigned == nil {
		t.Fatalf("iteration %d: last-known-good without assigned", iter)
	}
	if st.Assigned != nil {
		if _, err := os.Stat(c.store.snapshotPath(st.Assigned.UID)); err != nil {
			t.Fatalf("iteration %d: assigned snapshot missing: %v", iter, err)
		}
	}
	lkg := -1
	if st.LastKnownGood != nil {
		lkg = lkgGen(t, &c.store, st.LastKnownGood.UID)
	}
	if prevLKG >= 0 && lkg < prevLKG {
		t.Fatalf("iteration %d: last-known-good went from generation %d to %d", iter, prevLKG, lkg)
	}
	for _, d := range []string{state, filepath.Join(state, snapshotsDir)} {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if strings.Contains(e.Name(), tempInfix) {
				t.Fatalf("iteration %d: temp file %s left after restart", iter, e.Name())
			}
		}
	}
	return lkg
}

func TestCrashDuringConfigChanges(t *testing.T) {
	dir := t.TempDir()
	state, source := filepath.Join(dir, "state"), filepath.Join(dir, "source")

	// A full run, not killed, counts the crash points and times a run.
	start := time.Now()
	last, killed := crashRun(t, state, source, 0, 0, -1)
	full := time.Since(start)
	var points int
	if _, err := fmt.Sscanf(last, "done %d", &points); err != nil || killed || points == 0 {
		t.Fatalf("counting run: %q killed=%v", last, killed)
	}
	lkg := checkRestart(t, 0, state, source, -1)
	if want := 10*(crashCycles-1) + 1; lkg != want {
		t.Fatalf("counting run left last-known-good generation %d, want %d", lkg, want)
	}

	iter, crashes := 1, 0
	stride, randomKills := 1, 200
	if raceEnabled {
		stride, randomKills = 7, 10
	}
	// Every crash point of the write sequence, in order.
	for n := 1; n <= points; n += stride {
		_, killed := crashRun(t, state, source, 100*iter, n, -1)
		if killed {
			crashes++
		}
		lkg = checkRestart(t, iter, state, source, lkg)
		iter++
	}
	// Then kills at random times, including between the steps.
	seed := uint64(time.Now().UnixNano())
	t.Logf("random kill seed %d, full run %v, %d crash points", seed, full, points)
	rng := rand.New(rand.NewPCG(seed, 0))
	for k := 0; k < randomKills; k++ {
		delay := time.Duration(rng.Int64N(int64(full) + 1))
		_, killed := crashRun(t, state, source, 100*iter, 0, delay)
		if killed {
			crashes++
		}
		lkg = checkRestart(t, iter, state, source, lkg)
		iter++
	}
	t.Logf("%d runs, %d killed by SIGKILL, last-known-good generation %d", iter-1, crashes, lkg)
	if crashes < points/(2*stride) {
		t.Errorf("only %d of %d runs were killed", crashes, iter-1)
	}
	if lkg < 0 {
		t.Error("no last-known-good at the end")
	}
}
