package seccomp

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: Verify and the
// Command tests run children through os/exec, whose copying and
// context-watching goroutines must all have ended. The real runtimes (rt)
// are closed first, so that their client's goroutines are gone too, and a
// runtime that left anything on the host fails the package.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(closeRuntimes{m})
}

// closeRuntimes runs the tests, then closes rt.
type closeRuntimes struct{ m *testing.M }

func (c closeRuntimes) Run() int {
	code := c.m.Run()
	if err := rt.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	return code
}
