package testutil

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// deadlineTB is a recordingTB with the deadline of a go test -timeout.
type deadlineTB struct {
	recordingTB
	deadline time.Time
	message  string
}

func (d *deadlineTB) Deadline() (time.Time, bool) { return d.deadline, !d.deadline.IsZero() }

func (d *deadlineTB) Fatalf(format string, args ...any) {
	d.message = fmt.Sprintf(format, args...)
	d.recordingTB.Fatalf(format, args...)
}

// noDeadlineTB hides the test's Deadline, as a benchmark or -timeout 0.
type noDeadlineTB struct{ recordingTB }

func TestEventually(t *testing.T) {
	cases := []struct {
		name string
		// readyAt is the poll at which cond first returns nil; 0 never.
		readyAt  int
		deadline time.Duration // 0: none
		wantFail bool
	}{
		{"at once", 1, time.Hour, false},
		{"after some polls", 6, time.Hour, false},
		{"after some polls without a deadline", 6, 0, false},
		{"never, until the deadline's margin", 0, 1500 * time.Millisecond, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var tb testing.TB
			dtb := &deadlineTB{recordingTB: recordingTB{TB: t}}
			if tc.deadline > 0 {
				dtb.deadline = time.Now().Add(tc.deadline)
				tb = dtb
			} else {
				tb = &noDeadlineTB{recordingTB{TB: t}}
			}
			polls := 0
			func() {
				defer func() { _ = recover() }()
				Eventually(tb, "the widget is ready", func() error {
					polls++
					if tc.readyAt > 0 && polls >= tc.readyAt {
						return nil
					}
					return fmt.Errorf("widget state %d", polls)
				})
			}()
			if dtb.fatal != tc.wantFail {
				t.Fatalf("failed = %v, want %v (after %d polls; %q)", dtb.fatal, tc.wantFail, polls, dtb.message)
			}
			if !tc.wantFail {
				if polls != tc.readyAt {
					t.Errorf("cond called %d times, want %d: the wait goes on after the state is reached", polls, tc.readyAt)
				}
				return
			}
			// The report names the state waited for and the last one seen,
			// and comes before the deadline, with the margin kept.
			if want := "the widget is ready: not reached after"; !strings.HasPrefix(dtb.message, want) {
				t.Errorf("message %q does not start with %q", dtb.message, want)
			}
			if want := fmt.Sprintf("widget state %d", polls); !strings.HasSuffix(dtb.message, want) {
				t.Errorf("message %q does not end with the last state, %q", dtb.message, want)
			}
			if left := time.Until(dtb.deadline); left < minMargin/2 {
				t.Errorf("gave up %s before the deadline, want about %s kept for the cleanups", left, minMargin)
			}
			if polls < 2 {
				t.Errorf("gave up after %d polls", polls)
			}
		})
	}
}
