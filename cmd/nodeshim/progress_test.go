package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestProgress: nothing is drawn before the delay; after it, one line per
// phase, redrawn within a phase, and the summary; a quick command prints
// nothing.
func TestProgress(t *testing.T) {
	dump := func(n int64) criu.Progress { return criu.Progress{Phase: criu.PhaseDumping, Bytes: n, Total: 64 << 20} }
	for _, tc := range []struct {
		name   string
		before []criu.Progress // reported before the delay passes
		after  []criu.Progress // and after
		reveal bool
		want   string
	}{
		{name: "quick", before: []criu.Progress{{Phase: criu.PhaseFreezing}, dump(1 << 20), {Phase: criu.PhaseDone}}, want: ""},
		{
			name:   "slow",
			before: []criu.Progress{{Phase: criu.PhaseFreezing}, dump(1 << 20)},
			reveal: true,
			after:  []criu.Progress{dump(32 << 20), {Phase: criu.PhaseArchiving, Bytes: 40 << 20}, {Phase: criu.PhaseSyncing, Bytes: 64 << 20}},
			want: "dumping: 1.0 MiB of about 64.0 MiB" +
				"\r\033[Kdumping: 32.0 MiB of about 64.0 MiB" +
				"\nwriting the archive: 40.0 MiB" +
				"\nlog record\n" +
				"syncing the archive (64.0 MiB)" +
				"\nsummary\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			p := &progress{w: &buf}
			for _, pr := range tc.before {
				p.update(pr)
			}
			if tc.reveal {
				p.reveal()
			}
			for _, pr := range tc.after {
				if pr.Phase == criu.PhaseSyncing {
					// A log record between two phases.
					if _, err := p.Write([]byte("log record\n")); err != nil {
						t.Fatal(err)
					}
				}
				p.update(pr)
			}
			p.timer = stoppedTimer()
			p.done("summary")
			if got := buf.String(); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestProgressNotOnAPipe: output that is not a terminal gets no progress.
func TestProgressNotOnAPipe(t *testing.T) {
	if p := newProgress(&strings.Builder{}, 0); p != nil {
		t.Fatal("progress on a strings.Builder")
	}
}

func stoppedTimer() *time.Timer {
	tm := time.NewTimer(time.Hour)
	tm.Stop()
	return tm
}

// openPty returns the master and the slave of a new pseudo-terminal.
func openPty(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); m.Close() })
	return m, s
}

// TestCheckpointProgressOnTerminal checkpoints a counter with stderr on a
// terminal and -o json: stdout is exactly the JSON document, and stderr
// shows the phases and the frozen time (--progress-after 0: from the
// start), or nothing with the default delay when the checkpoint was quick.
func TestCheckpointProgressOnTerminal(t *testing.T) {
	testutil.RequireRoot(t)
	criutest.Require(t)
	for _, tc := range []struct {
		name  string
		after string
		// want on stderr, or nothing when the checkpoint took less
		// than quickerThan.
		want        []string
		quickerThan time.Duration
	}{
		{name: "from-the-start", after: "0s", want: []string{"freezing the process tree", "syncing the archive", "checkpointed in", "frozen"}},
		{name: "default-delay", after: progressDelay.String(), quickerThan: progressDelay},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid := startSleep(t)
			master, slave := openPty(t)
			var (
				mu     sync.Mutex
				shown  bytes.Buffer
				copied = make(chan struct{})
			)
			go func() {
				defer close(copied)
				buf := make([]byte, 4096)
				for {
					n, err := master.Read(buf)
					mu.Lock()
					shown.Write(buf[:n])
					mu.Unlock()
					if err != nil {
						return
					}
				}
			}()
			root := newRootCommand()
			var out bytes.Buffer
			root.SetOut(&out)
			root.SetErr(slave)
			root.SetArgs([]string{"checkpoint", "--pid", strconv.Itoa(pid), "--root-dir", t.TempDir(), "--progress-after", tc.after, "-o", "json"})
			if err := root.Execute(); err != nil {
				t.Fatal(err)
			}
			var res checkpointOutput
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatalf("stdout is not one JSON document: %v: %q", err, out.String())
			}
			// Closing the slave ends the reader once the pty has
			// delivered what was written.
			slave.Close()
			<-copied
			mu.Lock()
			got := shown.String()
			mu.Unlock()
			t.Logf("checkpoint took %.3fs; stderr: %q", res.TotalSeconds, got)
			for _, want := range tc.want {
				if !strings.Contains(got, want) {
					t.Errorf("stderr lacks %q: %q", want, got)
				}
			}
			if tc.quickerThan > 0 && time.Duration(res.TotalSeconds*float64(time.Second)) < tc.quickerThan && strings.Contains(got, "checkpointed in") {
				t.Errorf("a checkpoint quicker than %s showed progress: %q", tc.quickerThan, got)
			}
		})
	}
}

// startSleep starts a detached sleep in a session of its own (CRIU dumps
// a tree with its session leader) and kills it when t ends.
func startSleep(t *testing.T) int {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "pid")
	if err := exec.Command("setsid", "-f", "sh", "-c", `echo $$ > "$0"; exec sleep 1000`, pidFile).Run(); err != nil {
		t.Fatal(err)
	}
	var pid int
	testutil.Eventually(t, "sleep writes its pid to "+pidFile, func() error {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return err
		}
		if pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			return fmt.Errorf("%s holds %q", pidFile, b)
		}
		return nil
	})
	t.Cleanup(func() { stop(t, pid) })
	return pid
}
