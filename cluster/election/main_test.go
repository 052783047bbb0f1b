package election

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/nodeshim/nodeshim/internal/kubetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, kubetest.ClientLoops()...)
}
