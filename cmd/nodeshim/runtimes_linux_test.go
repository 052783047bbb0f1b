package main

import (
	"os"
	"testing"

	"github.com/nodeshim/nodeshim/testenv/runtimetest"
)

// rt is the package's real container runtimes (testenv/runtimetest),
// started on first use and closed by TestMain.
var rt runtimetest.Env

// TestMain closes rt after the tests; a runtime that left anything on the
// host fails the package.
func TestMain(m *testing.M) { os.Exit(rt.Main(m)) }
