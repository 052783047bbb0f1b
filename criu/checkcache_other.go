//go:build !linux

package criu

import (
	"os"
	"time"
)

// fillIdentity adds nothing where there is no Stat_t to read.
func fillIdentity(*binaryIdentity, os.FileInfo) {}

// prepareKerndat keeps nothing where CRIU does not run.
func prepareKerndat(string, bool, time.Time, time.Time) (bool, string) { return false, "" }

// bootTime is not known where CRIU does not run.
func bootTime(now time.Time) (time.Time, error) { return now, nil }

// kerndatRun starts criu as it is where CRIU does not run.
func kerndatRun(string, time.Time) (bool, starter, func(), string) {
	return false, nil, func() {}, ""
}
