//go:build !linux

package criu

import (
	"context"
	"errors"
)

// rpcFeatures is empty where CRIU does not run.
var rpcFeatures = map[string]func(*struct{}) **bool{}

// rpcChecks fails where CRIU does not run; runChecks then uses the
// command line.
func rpcChecks(context.Context, Binary, starter, []string, func([]string)) (checkResults, []string, error) {
	return checkResults{}, nil, errors.New("criu swrk runs on Linux only")
}
