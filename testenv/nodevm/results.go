package nodevm

import (
	"bufio"
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// TestResult is one test's verdict in `go test -v` output.
type TestResult struct {
	// Name is the test's name, subtests with their parent ("TestA/b").
	Name string
	// Passed, Failed and Skipped: exactly one is set.
	Passed, Failed, Skipped bool
	// Duration is what go test printed.
	Duration time.Duration
	// Unfinished says that the test started and printed no verdict (the
	// node stopped, or the binary crashed): it counts as failed.
	Unfinished bool
}

// Results are the verdicts of one run of a test binary.
type Results struct {
	// Tests lists every verdict line, in order.
	Tests []TestResult
	// Output is the test output up to the journal.
	Output string
	// Journal is what the node appended after JournalMarker.
	Journal string
}

// Counts returns the number of top-level tests that passed, failed and
// skipped (subtests are counted in their parent).
func (r Results) Counts() (passed, failed, skipped int) {
	for _, t := range r.Tests {
		if strings.Contains(t.Name, "/") {
			continue
		}
		switch {
		case t.Passed:
			passed++
		case t.Failed:
			failed++
		case t.Skipped:
			skipped++
		}
	}
	return passed, failed, skipped
}

// verdictLine matches go test -v's "--- PASS: TestX (1.23s)", indented for
// subtests.
var verdictLine = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \(([0-9.]+)s\)`)

// ParseResults reads the verbose output of a test binary, followed
// optionally by JournalMarker and the node's journal.
func ParseResults(out []byte) Results {
	var r Results
	text, journal, found := bytes.Cut(out, []byte(JournalMarker+"\n"))
	if !found {
		text, journal, _ = bytes.Cut(out, []byte(JournalMarker))
	}
	r.Output, r.Journal = string(text), string(journal)
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	var started []string
	seen := map[string]bool{}
	for sc.Scan() {
		if name, ok := strings.CutPrefix(sc.Text(), "=== RUN   "); ok {
			if name = strings.TrimSpace(name); name != "" && !strings.Contains(name, "/") {
				started = append(started, name)
			}
			continue
		}
		m := verdictLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		seen[m[2]] = true
		secs, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		t := TestResult{Name: m[2], Duration: time.Duration(secs * float64(time.Second))}
		switch m[1] {
		case "PASS":
			t.Passed = true
		case "FAIL":
			t.Failed = true
		case "SKIP":
			t.Skipped = true
		}
		r.Tests = append(r.Tests, t)
	}
	for _, name := range started {
		if !seen[name] {
			seen[name] = true
			r.Tests = append(r.Tests, TestResult{Name: name, Failed: true, Unfinished: true})
		}
	}
	return r
}

// Times are the points of the node's boot it said on the console, in
// seconds of its uptime (TimeMarker lines), by name.
type Times map[string]float64

// ParseTime reads one console line: a TimeMarker line "time <what>
// <seconds>" sets t[what] and returns true.
func (t Times) ParseTime(line string) bool {
	i := strings.Index(line, TimeMarker)
	if i < 0 {
		return false
	}
	f := strings.Fields(line[i+len(TimeMarker):])
	if len(f) != 3 || f[0] != "time" {
		return false
	}
	s, err := strconv.ParseFloat(f[2], 64)
	if err != nil || s < 0 {
		return false
	}
	t[f[1]] = s
	return true
}
