//go:build !linux

package criu

import "testing"

// kernelTracksSoftDirty is false off Linux.
func kernelTracksSoftDirty(*testing.T) bool { return false }
