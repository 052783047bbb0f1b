package cgroup

import (
	"errors"
	"fmt"
	"strconv"
)

// Resource names a resource whose pressure the kernel accounts (PSI).
type Resource string

// The resources with a *.pressure file in a cgroup v2 cgroup and in
// /proc/pressure. cgroup.pressure is not a resource but a switch (kernel 6.2+),
// so it has no Resource value.
const (
	CPU    Resource = "cpu"
	Memory Resource = "memory"
	IO     Resource = "io"
)

// Resources lists the PSI resources in a fixed order.
var Resources = [...]Resource{CPU, Memory, IO}

// PressureFile returns the file name holding r's pressure in a cgroup.
func (r Resource) PressureFile() string { return string(r) + ".pressure" }

// Avg is a PSI running average in hundredths of a percent, exactly as the
// kernel prints it ("%lu.%02lu" in kernel/sched/psi.c, psi_show): 1234 is
// 12.34 %.
type Avg uint32

// Percent returns a as a percentage.
func (a Avg) Percent() float64 { return float64(a) / 100 }

// String prints a the way the kernel does.
func (a Avg) String() string { return fmt.Sprintf("%d.%02d", a/100, a%100) }

// PSILine is one line of a PSI file: the share of wall time in which some (or
// all) runnable tasks stalled on the resource, averaged over 10, 60 and 300 s,
// and the total stall time in microseconds since boot or cgroup creation.
type PSILine struct {
	Avg10, Avg60, Avg300 Avg
	// Total is the cumulative stall time in microseconds.
	Total uint64
}

// PSI is a parsed PSI file. Full is absent (HasFull false) in cpu.pressure
// before kernel 5.13; where present for cpu at the system level it is zero.
type PSI struct {
	Some    PSILine
	Full    PSILine
	HasFull bool
}

// ErrPSISyntax is wrapped by every error ParsePSI returns.
var ErrPSISyntax = errors.New("malformed PSI data")

// ParsePSI parses the contents of a *.pressure file or of /proc/pressure/*.
// It is exact: a "some" line must come first, an optional "full" line second,
// each with avg10, avg60, avg300 (two decimals, at most 100.00) and total in
// this order, separated by single spaces, each line ending in a newline
// (the last one may lack it). Anything else is an error wrapping
// ErrPSISyntax. It does not allocate on success.
func ParsePSI(data []byte) (PSI, error) {
	var p PSI
	rest, err := parsePSILine(data, "some ", &p.Some)
	// p stays on the stack: parsePSILine writes through out only.
	if err != nil {
		return PSI{}, err
	}
	if len(rest) == 0 {
		return p, nil
	}
	rest, err = parsePSILine(rest, "full ", &p.Full)
	if err != nil {
		return PSI{}, err
	}
	if len(rest) != 0 {
		return PSI{}, fmt.Errorf("%w: trailing data %q", ErrPSISyntax, clip(rest))
	}
	p.HasFull = true
	return p, nil
}

func parsePSILine(b []byte, kind string, out *PSILine) ([]byte, error) {
	var ok bool
	if b, ok = cutPrefix(b, kind); !ok {
		return nil, fmt.Errorf("%w: want %q at %q", ErrPSISyntax, kind, clip(b))
	}
	var avgs [3]Avg
	for i, key := range [3]string{"avg10=", "avg60=", "avg300="} {
		if b, ok = cutPrefix(b, key); !ok {
			return nil, syntaxError("want "+key, b)
		}
		var v Avg
		if v, b, ok = parseAvg(b); !ok || len(b) == 0 || b[0] != ' ' {
			return nil, syntaxError("bad "+key+" value", b)
		}
		avgs[i] = v
		b = b[1:]
	}
	out.Avg10, out.Avg60, out.Avg300 = avgs[0], avgs[1], avgs[2]
	if b, ok = cutPrefix(b, "total="); !ok {
		return nil, fmt.Errorf("%w: want \"total=\" at %q", ErrPSISyntax, clip(b))
	}
	n := digits(b)
	if n == 0 || n > 20 || (n > 1 && b[0] == '0') {
		return nil, fmt.Errorf("%w: bad total at %q", ErrPSISyntax, clip(b))
	}
	t, ok := atou(b[:n])
	if !ok {
		return nil, fmt.Errorf("%w: total overflows at %q", ErrPSISyntax, clip(b))
	}
	out.Total = t
	b = b[n:]
	switch {
	case len(b) == 0:
		return b, nil
	case b[0] == '\n':
		return b[1:], nil
	}
	return nil, fmt.Errorf("%w: want end of line at %q", ErrPSISyntax, clip(b))
}

// syntaxError is kept out of line so that the error path's allocations do
// not make the parser's values escape.
//
//go:noinline
func syntaxError(what string, at []byte) error {
	return fmt.Errorf("%w: %s at %q", ErrPSISyntax, what, clip(at))
}

// parseAvg reads "I.FF" with 1-3 integer digits and exactly two decimals.
func parseAvg(b []byte) (Avg, []byte, bool) {
	n := digits(b)
	if n == 0 || n > 3 || (n > 1 && b[0] == '0') || len(b) < n+3 || b[n] != '.' || digits(b[n+1:n+3]) != 2 {
		return 0, b, false
	}
	i, _ := atou(b[:n])
	f, _ := atou(b[n+1 : n+3])
	v := i*100 + f
	if v > 10000 {
		return 0, b, false
	}
	return Avg(v), b[n+3:], true
}

func cutPrefix(b []byte, p string) ([]byte, bool) {
	if len(b) < len(p) || string(b[:len(p)]) != p {
		return b, false
	}
	return b[len(p):], true
}

func digits(b []byte) int {
	n := 0
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		n++
	}
	return n
}

// atou parses decimal digits into a uint64, reporting overflow.
func atou(b []byte) (uint64, bool) {
	var v uint64
	for _, c := range b {
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// clip shortens b for an error message.
func clip(b []byte) string {
	if len(b) > 32 {
		return string(b[:32]) + "..."
	}
	return string(b)
}

// String prints p in the kernel's format.
func (p PSI) String() string {
	s := "some " + p.Some.String() + "\n"
	if p.HasFull {
		s += "full " + p.Full.String() + "\n"
	}
	return s
}

// String prints l in the kernel's format, without the some/full prefix.
func (l PSILine) String() string {
	return "avg10=" + l.Avg10.String() + " avg60=" + l.Avg60.String() + " avg300=" + l.Avg300.String() + " total=" + strconv.FormatUint(l.Total, 10)
}
