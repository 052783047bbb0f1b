package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/nodeshim/nodeshim/internal/runtimetest"
)

// rt is the package's real container runtimes (internal/runtimetest),
// started on first use and closed by TestMain.
var rt runtimetest.Env

// TestMain closes rt after the tests; a runtime that left anything on the
// host fails the package.
func TestMain(m *testing.M) {
	code := m.Run()
	if err := rt.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}
