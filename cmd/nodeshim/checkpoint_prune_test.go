package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/criu/workentry"
	"github.com/nodeshim/nodeshim/shim/checkpoint/retention"
)

// TestCheckpointPrune: --dry-run lists and keeps, then the prune removes
// the same archives; the flags override the configuration.
func TestCheckpointPrune(t *testing.T) {
	dir := t.TempDir()
	names := []string{
		"checkpoint-web-0_default-app-2026-01-01T00:00:00Z.tar",
		"checkpoint-web-0_default-app-2026-01-02T00:00:00Z.tar",
		"checkpoint-web-0_default-app-2026-01-03T00:00:00Z.tar",
	}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, dry := range []bool{true, false} {
		args := []string{"checkpoint", "prune", "--dir", dir, "--max-per-container", "1", "-o", "json"}
		if dry {
			args = append(args, "--dry-run")
		}
		out, _, err := runSplit(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		var res retention.Result
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		var removed []string
		for _, r := range res.Removed {
			removed = append(removed, r.Name)
		}
		if !slices.Equal(removed, names[:2]) {
			t.Errorf("dry run %v: removed %v, want %v", dry, removed, names[:2])
		}
		left, _ := retention.Scan(dir, workentry.Owners{})
		if want := map[bool]int{true: 3, false: 1}[dry]; len(left.Archives) != want {
			t.Errorf("dry run %v: %d archives left, want %d", dry, len(left.Archives), want)
		}
	}
	if _, _, err := runSplit(t, "checkpoint", "prune", "--dir", dir, "--max-bytes", "lots"); err == nil || !strings.Contains(err.Error(), "--max-bytes") {
		t.Errorf("bad --max-bytes: %v", err)
	}
}
