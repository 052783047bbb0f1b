package migration

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/nodeshim/nodeshim/testenv/kubetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, kubetest.ClientLoops()...)
}
