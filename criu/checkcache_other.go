//go:build !linux

package criu

import "os"

// fillIdentity adds nothing where there is no Stat_t to read.
func fillIdentity(*binaryIdentity, os.FileInfo) {}

// criuKeepsKerndat is false where CRIU does not run.
func criuKeepsKerndat(string) bool { return false }
