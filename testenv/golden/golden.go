// Package golden compares what a test produces with a golden file under the
// package's testdata/ directory, and rewrites the file instead when the test
// binary runs with -update (go test ./pkg -run TestX -update).
//
// Only tests import it: importing it registers the -update flag.
package golden

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

// update is the -update flag of the test binary that imports this package.
var update = flag.Bool("update", false, "rewrite the golden files under testdata/ with what the tests produce")

// Updating reports whether the test binary runs with -update.
func Updating() bool {
	return *update
}

// Path returns the golden file's path for name, relative to the package
// directory: testdata/name. Name may hold slashes.
func Path(name string) string {
	return filepath.Join("testdata", filepath.FromSlash(name))
}

// Check compares got with the golden file testdata/name and reports a
// difference as an error of t. Under -update it writes got to the file
// instead, creating its directory.
func Check(t testing.TB, name string, got []byte) {
	t.Helper()
	path := Path(name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update creates it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// CheckJSON checks v, marshalled as JSON indented by two spaces and ending
// in a newline, against the golden file testdata/name like Check.
func CheckJSON(t testing.TB, name string, v any) {
	t.Helper()
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatalf("marshal %s: %v", name, err)
	}
	Check(t, name, append(got, '\n'))
}
