//go:build !linux

package criu

import (
	"context"
	"errors"
)

// kernelRelease is empty off Linux.
func kernelRelease() string { return "" }

// askConntrack has no ctnetlink to ask off Linux.
func askConntrack(context.Context) error {
	return errors.New("ctnetlink: not Linux")
}
