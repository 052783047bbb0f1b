package config

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(envCrashChild) != "" {
		crashChild()
		return
	}
	goleak.VerifyTestMain(m)
}
