package seccomp

import (
	"os"
	"testing"
)

// TestMain checks that no test leaves a goroutine behind: Verify and the
// Command tests run children through os/exec, whose copying and
// context-watching goroutines must all have ended. The real runtimes (rt)
// are closed first, so that their client's goroutines are gone too, and a
// runtime that left anything on the host fails the package.
func TestMain(m *testing.M) { os.Exit(rt.Main(m)) }
