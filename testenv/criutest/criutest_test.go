package criutest

import (
	"testing"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestRequireChecked finds the CRIU make installs and runs its check; the
// binary it returns is an executable file.
func TestRequireChecked(t *testing.T) {
	testutil.RequireRoot(t)
	bin := RequireChecked(t)
	testutil.RequireFile(t, bin.Path)
	if bin.Source == "" {
		t.Errorf("criu %s: no source recorded", bin.Path)
	}
}
