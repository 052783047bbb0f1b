package vmtest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Marker starts every line that the guest's init script prints for the
// harness on the serial console. The kernel may print into the middle of a
// line, so a marker is recognised anywhere in a line.
const Marker = "NODESHIM-VMTEST:"

// panicPrefix is how the kernel announces a panic on the console
// (kernel/panic.c: pr_emerg("Kernel panic - not syncing: %s\n", buf)).
const panicPrefix = "Kernel panic - not syncing"

// Errors that name why a guest run failed. Every error from Evaluate wraps
// one of them, so that callers and tests can tell them apart.
var (
	// ErrGuestPanic means the guest kernel panicked.
	ErrGuestPanic = errors.New("guest kernel panicked")
	// ErrGuestHung means the guest did not finish in time and QEMU was killed.
	ErrGuestHung = errors.New("guest hung: QEMU killed after the timeout")
	// ErrMissingBinary means a test binary that should be in the guest was not.
	ErrMissingBinary = errors.New("test binary missing")
	// ErrTestsFailed means a test binary ran in the guest and exited non-zero.
	ErrTestsFailed = errors.New("guest tests failed")
	// ErrGuestSetup means the init script could not prepare the guest.
	ErrGuestSetup = errors.New("guest setup failed")
	// ErrGuestIncomplete means the guest stopped before reporting every result.
	ErrGuestIncomplete = errors.New("guest stopped before finishing")
)

// Console follows the serial console of one guest line by line and records
// what the init script and the kernel said. The zero value is ready to use.
type Console struct {
	// Begun lists the test binaries that started, in order.
	Begun []string
	// Exit holds the exit status of each test binary that finished.
	Exit map[string]int
	// Missing lists the test binaries the guest did not find.
	Missing []string
	// SetupFailures lists what the init script could not set up.
	SetupFailures []string
	// Report is the exit status of `nodeshim report`; ReportStatus says
	// whether the guest reported one.
	Report int
	// ReportAbsent is set when the nodeshim binary has no report command.
	ReportAbsent bool
	// Panic holds the kernel's panic line, if it panicked.
	Panic string
	// Done is set when the init script finished.
	Done bool
	// Unparsed counts marker lines that did not parse.
	Unparsed []string

	reportSeen bool
}

// Line feeds one console line (without its line ending) to c.
func (c *Console) Line(line string) {
	line = strings.TrimRight(line, "\r\n")
	if c.Panic == "" {
		if i := strings.Index(line, panicPrefix); i >= 0 {
			c.Panic = line[i:]
		}
	}
	i := strings.Index(line, Marker)
	if i < 0 {
		return
	}
	fields := strings.Fields(line[i+len(Marker):])
	if !c.marker(fields) {
		c.Unparsed = append(c.Unparsed, line[i:])
	}
}

// marker records one marker's fields and reports whether they parsed.
func (c *Console) marker(f []string) bool {
	if len(f) == 0 {
		return false
	}
	switch {
	case f[0] == "begin" && len(f) == 2:
		c.Begun = append(c.Begun, f[1])
	case f[0] == "end" && len(f) == 3:
		n, err := strconv.Atoi(f[2])
		if err != nil || n < 0 {
			return false
		}
		if c.Exit == nil {
			c.Exit = map[string]int{}
		}
		c.Exit[f[1]] = n
	case f[0] == "missing" && len(f) == 2:
		c.Missing = append(c.Missing, f[1])
	case f[0] == "setup-failed" && len(f) >= 2:
		c.SetupFailures = append(c.SetupFailures, strings.Join(f[1:], " "))
	case f[0] == "report" && len(f) == 2 && f[1] == "absent":
		c.ReportAbsent = true
	case f[0] == "report" && len(f) == 2:
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 0 {
			return false
		}
		c.Report, c.reportSeen = n, true
	case f[0] == "done" && len(f) == 1:
		c.Done = true
	default:
		return false
	}
	return true
}

// ReportStatus returns the exit status of `nodeshim report` in the guest and
// whether the guest reported one.
func (c *Console) ReportStatus() (int, bool) { return c.Report, c.reportSeen }

// Outcome is the verdict on one guest run.
type Outcome struct {
	// Err is nil when every expected test binary ran and passed.
	Err error
	// ExitStatus is what the harness exits with for this guest: 0, the
	// first non-zero exit status of a test binary, or 1 for any other failure.
	ExitStatus int
}

// Evaluate judges a guest run: expected names the test binaries that were
// packed into the image, hung says that the timeout killed QEMU, and qemuErr
// is how QEMU itself ended. Its error names every reason the run failed.
func (c *Console) Evaluate(expected []string, hung bool, qemuErr error) Outcome {
	var errs []error
	status := 0
	fail := func(code int, err error) {
		errs = append(errs, err)
		if status == 0 {
			status = code
		}
	}
	if c.Panic != "" {
		fail(1, fmt.Errorf("%w: %s", ErrGuestPanic, c.Panic))
	}
	if hung {
		last := "none"
		if n := len(c.Begun); n > 0 {
			last = c.Begun[n-1]
		}
		fail(1, fmt.Errorf("%w (last test binary started: %s)", ErrGuestHung, last))
	}
	for _, s := range c.SetupFailures {
		fail(1, fmt.Errorf("%w: %s", ErrGuestSetup, s))
	}
	for _, m := range c.Missing {
		fail(1, fmt.Errorf("%w in the guest: %s", ErrMissingBinary, m))
	}
	for _, name := range expected {
		code, ok := c.Exit[name]
		switch {
		case ok && code != 0:
			fail(code, fmt.Errorf("%w: %s exited with status %d", ErrTestsFailed, name, code))
		case !ok && !contains(c.Missing, name) && c.Panic == "" && !hung:
			fail(1, fmt.Errorf("%w: no result for %s", ErrGuestIncomplete, name))
		}
	}
	if code, ok := c.ReportStatus(); ok && code != 0 && code != 3 {
		// nodeshim report exits 3 when it ran fine but found a problem.
		fail(1, fmt.Errorf("%w: nodeshim report exited with status %d", ErrTestsFailed, code))
	}
	if !c.Done && c.Panic == "" && !hung {
		err := fmt.Errorf("%w: no %s done line", ErrGuestIncomplete, Marker)
		if qemuErr != nil {
			err = fmt.Errorf("%w: no %s done line (qemu: %v)", ErrGuestIncomplete, Marker, qemuErr)
		}
		fail(1, err)
	}
	for _, u := range c.Unparsed {
		fail(1, fmt.Errorf("%w: unparsed console marker %q", ErrGuestSetup, u))
	}
	return Outcome{Err: errors.Join(errs...), ExitStatus: status}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
