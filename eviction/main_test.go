package eviction

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: a Monitor runs
// its watchers' goroutines until Run returns.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
