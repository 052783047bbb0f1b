package seccomp

import "github.com/nodeshim/nodeshim/testenv/runtimetest"

// rt is the test binary's real container runtimes (testenv/runtimetest),
// started on first use and closed by TestMain.
var rt runtimetest.Env

// Runtimes is rt for the tests of package seccomp_test, which install
// profiles through shim/profiles (an importer of this package).
var Runtimes = &rt
