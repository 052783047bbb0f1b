package golden

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps the errors reported to it.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func TestCheck(t *testing.T) {
	if Updating() {
		t.Fatal("the golden package's own test compares only; run it without -update")
	}
	CheckJSON(t, "a.json", map[string]int{"a": 1})

	r := &recorder{TB: t}
	Check(r, "a.json", []byte("{\"a\": 2}\n"))
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "testdata/a.json differs") || !strings.Contains(r.errs[0], `"a": 2`) {
		t.Fatalf("a differing output reported %q", r.errs)
	}
}
