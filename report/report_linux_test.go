package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestCollectUsesPerBootCache collects the report twice with one cache
// directory, as serve does at start and again after a restart: the first
// writes the per-boot verdicts there, the second answers them from there,
// as the second `nodeshim report` of a boot does.
func TestCollectUsesPerBootCache(t *testing.T) {
	testutil.RequireRoot(t)
	root := t.TempDir()
	collect := Options{Host: *kernel.HostUnder("/", ""), CacheDir: filepath.Join(root, "report-cache")}.Collect
	byID := func() map[string]capability.Result {
		t.Helper()
		r, err := collect(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]capability.Result{}
		for _, res := range r.Requirements {
			m[res.ID] = res
		}
		return m
	}
	first := byID()
	if _, err := os.Stat(filepath.Join(root, "report-cache", capability.BootCacheFile)); err != nil {
		t.Fatalf("serve's report kept no per-boot verdicts: %v", err)
	}
	second := byID()
	perBoot := 0
	for _, req := range Catalogue() {
		if !req.PerBoot || first[req.ID].Verdict == capability.Unknown {
			continue
		}
		perBoot++
		if b := second[req.ID]; !strings.Contains(b.Evidence, "(cached: probed at") || b.Verdict != first[req.ID].Verdict {
			t.Errorf("%s: second report %s %q, want the first's %s from the cache", req.ID, b.Verdict, b.Evidence, first[req.ID].Verdict)
		}
	}
	if perBoot == 0 {
		t.Error("no per-boot requirement had a definitive verdict to cache")
	}
}
