package runtimeneeds

import (
	"os"
	"testing"

	"github.com/nodeshim/nodeshim/testenv/runtimetest"
)

// rt is the package's real container runtimes: the runc and crun that
// podman runs (crun through its hybrid-layout wrapper on this host),
// started on first use and closed by TestMain, which fails the package
// when anything is left behind or a goroutine leaks.
var rt runtimetest.Env

func TestMain(m *testing.M) { os.Exit(rt.Main(m)) }
