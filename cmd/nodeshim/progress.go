package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/criu"
)

// progressDelay is how long a checkpoint or restore runs, by default,
// before it shows its progress: a quick one prints nothing but its result.
const progressDelay = time.Second

// progress shows the phases of a checkpoint or restore on a terminal: one
// line per phase, redrawn as its byte count grows, from progressDelay on.
// Only stderr gets it, so stdout (-o json) stays clean.
type progress struct {
	w     io.Writer
	timer *time.Timer

	mu     sync.Mutex
	shown  bool
	last   criu.Progress
	have   bool
	drawn  string // the phase of the line on screen
	open   bool   // the cursor is at the end of that line
	closed bool
}

// newProgress returns a progress on w that shows from after on, or nil
// when w is not a terminal.
func newProgress(w io.Writer, after time.Duration) *progress {
	if !isTerminal(w) {
		return nil
	}
	p := &progress{w: w}
	p.timer = time.AfterFunc(after, p.reveal)
	return p
}

// addProgressFlag adds --progress-after to cmd.
func addProgressFlag(cmd *cobra.Command, after *time.Duration) {
	cmd.Flags().DurationVar(after, "progress-after", progressDelay, "on a terminal, show the phases on stderr once the command has run this long")
}

// update records a phase; it is drawn once the delay has passed.
func (p *progress) update(pr criu.Progress) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last, p.have = pr, true
	if p.shown && !p.closed {
		p.draw()
	}
}

// reveal starts drawing: the command has taken longer than the delay.
func (p *progress) reveal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.shown = true
	if p.have {
		p.draw()
	}
}

// draw writes the last progress: over the current line within a phase, on
// a new line for a new phase. Callers hold p.mu.
func (p *progress) draw() {
	switch {
	case !p.open:
	case p.drawn == p.last.Phase:
		fmt.Fprint(p.w, "\r\033[K")
	default:
		fmt.Fprint(p.w, "\n")
	}
	p.drawn, p.open = p.last.Phase, true
	fmt.Fprint(p.w, describeProgress(p.last))
}

// Write writes a log record below the progress line, so that logs and
// progress share stderr without garbling each other.
func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.open {
		fmt.Fprint(p.w, "\n")
		p.open = false
	}
	return p.w.Write(b)
}

// logOutput is where a command's logs go: through p when it shows
// progress, else straight to w.
func (p *progress) logOutput(w io.Writer) io.Writer {
	if p == nil {
		return w
	}
	return p
}

// done ends the display with summary on a line of its own, if anything
// was shown.
func (p *progress) done(summary string) {
	if p == nil {
		return
	}
	p.timer.Stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.shown && p.drawn != "" {
		if p.open {
			fmt.Fprint(p.w, "\n")
		}
		fmt.Fprintf(p.w, "%s\n", summary)
	}
}

// describeProgress is the line for one progress report.
func describeProgress(pr criu.Progress) string {
	switch pr.Phase {
	case criu.PhaseFreezing:
		return "freezing the process tree"
	case criu.PhaseDumping:
		if pr.Total > 0 {
			return fmt.Sprintf("dumping: %s of about %s", humanBytes(pr.Bytes), humanBytes(pr.Total))
		}
		return "dumping: " + humanBytes(pr.Bytes)
	case criu.PhaseArchiving:
		return "writing the archive: " + humanBytes(pr.Bytes)
	case criu.PhaseSyncing:
		return fmt.Sprintf("syncing the archive (%s)", humanBytes(pr.Bytes))
	case criu.PhaseDone:
		return fmt.Sprintf("archive written (%s)", humanBytes(pr.Bytes))
	case criu.PhaseUnpacking:
		return "validating and unpacking the archive"
	case criu.PhaseRestoring:
		return "restoring"
	default:
		return pr.Phase
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
