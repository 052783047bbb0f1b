package status

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestSetSourceConcurrentFailures: sources failing at once are all named
// in ShimHealthy; none is lost to a concurrent update.
func TestSetSourceConcurrentFailures(t *testing.T) {
	for round := range 200 {
		m := New(nil)
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m.SetSource(fmt.Sprintf("s%d", i), SourceFailed, "boom")
			}()
		}
		wg.Wait()
		var msg string
		for _, c := range m.Snapshot().Conditions {
			if c.Type == TypeShimHealthy {
				msg = c.Message
			}
		}
		for i := range 4 {
			if !strings.Contains(msg, fmt.Sprintf("source s%d failed", i)) {
				t.Fatalf("round %d: ShimHealthy %q lacks source s%d", round, msg, i)
			}
		}
	}
}
