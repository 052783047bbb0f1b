package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestVersion(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		check func(t *testing.T, out string)
	}{
		{"table", []string{"version"}, func(t *testing.T, out string) {
			if !strings.HasPrefix(out, "nodeshim devel (commit unknown, "+runtime.Version()) {
				t.Errorf("got %q", out)
			}
		}},
		{"json", []string{"version", "-o", "json"}, func(t *testing.T, out string) {
			var v versionInfo
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Fatalf("decode %q: %v", out, err)
			}
			if v.GoVersion != runtime.Version() || v.Version != "devel" || v.Commit != "unknown" {
				t.Errorf("got %+v", v)
			}
		}},
		{"yaml", []string{"version", "-o", "yaml"}, func(t *testing.T, out string) {
			if !strings.Contains(out, "goVersion: "+runtime.Version()) {
				t.Errorf("got %q", out)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, out)
		})
	}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{"version", "-o", "xml"},
		{"version", "--no-such-flag"},
	} {
		_, err := run(t, args...)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitUsage {
			t.Errorf("%v: got %v, want exit code %d", args, err, exitUsage)
		}
	}
}
