// Package criutest gates a test on CRIU: the binary nodeshim itself would
// use ($NODESHIM_CRIU, which make sets to the CRIU it installs under .tools,
// else criu on PATH).
package criutest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// Require returns the CRIU binary, or skips t through the testutil gate
// when there is none (a failure under NODESHIM_REQUIRE_PRIVILEGED=1, except
// in a kernel-matrix guest, which carries no CRIU).
func Require(t testing.TB) criu.Binary {
	t.Helper()
	testutil.SkipIfGuestLacks(t, "criu")
	bin, err := criu.Find("", nil)
	if err != nil {
		testutil.Skip(t, "no criu (make test installs one under .tools): %v", err)
	}
	return bin
}

// RequireChecked is Require, and `criu check` must pass on this kernel.
func RequireChecked(t testing.TB) criu.Binary {
	t.Helper()
	bin := Require(t)
	if _, err := bin.Check(t.Context()); err != nil {
		testutil.Skip(t, "%v", err)
	}
	return bin
}

// RequireOnPath is Require, and puts that CRIU first on PATH for the rest
// of t, as criu: the runc that podman or containerd runs for a checkpoint
// or a restore then finds the same CRIU as nodeshim.
func RequireOnPath(t testing.TB) criu.Binary {
	t.Helper()
	bin := Require(t)
	dir := filepath.Join(t.TempDir(), "criu-bin")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin.Path, filepath.Join(dir, "criu")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return bin
}
