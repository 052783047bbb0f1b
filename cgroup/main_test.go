package cgroup

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// envThrash makes the test binary a thrashing workload instead of running
// tests: see thrashMain.
const envThrash = "NODESHIM_CGROUP_THRASH"

func TestMain(m *testing.M) {
	if os.Getenv(envThrash) != "" {
		os.Exit(thrashMain(os.Getenv(envThrash)))
	}
	goleak.VerifyTestMain(m)
}
