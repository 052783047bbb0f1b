package seccomp

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: Verify and the
// Command tests run children through os/exec, whose copying and
// context-watching goroutines must all have ended.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
