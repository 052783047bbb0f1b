// Command nodeshim is the privileged half of a Kubernetes node agent: it
// probes the kernel, watches cgroup v2 pressure, compiles and installs seccomp
// filters, drives CRIU checkpoints and serves the node's status.
//
// Exit codes: 0 on success, 1 on failure, 2 on a usage error, 3 when the
// command ran fine but found a problem it was asked to check for (for
// example `nodeshim report --require` naming a requirement that is not
// Supported).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// Set at build time with -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "devel"
	commit  = "unknown"
)

// Exit codes documented in the package comment.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	exitProblem = 3
)

// exitError carries an exit code other than exitFailure up to main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// withExitCode marks err to end the process with code.
func withExitCode(code int, err error) error {
	return &exitError{code: code, err: err}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "nodeshim",
		Short: "The privileged, kernel-facing half of a Kubernetes node agent",
		Long: `nodeshim talks to the kernel so that the rest of the cluster does not have to.

It probes what this node's kernel can do, watches cgroup v2 stats and PSI for
pressure, compiles and installs seccomp profiles, checkpoints and restores
processes with CRIU, and serves the node's status to an unprivileged reporter.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Older spellings of flags still work, with a warning; see
		// docs/cli.md.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return resolveDeprecated(cmd) },
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return withExitCode(exitUsage, err)
	})
	root.AddCommand(
		newVersionCommand(),
		newReportCommand(),
		newSeccompCommand(),
		newCheckpointCommand(), newRestoreCommand(),
		newServeCommand(), newStatusCommand(),
		newPressureCommand(),
		newReporterCommand(),
		newControllerCommand(),
	)
	return root
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root := newRootCommand()
	tuneGarbageCollector(root, os.Args[1:])
	err := root.ExecuteContext(ctx)
	stop()
	if err == nil {
		os.Exit(exitOK)
	}
	code := exitFailure
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	fmt.Fprintf(os.Stderr, "nodeshim: %v\n", err)
	slog.Debug("exit", "code", code)
	os.Exit(code)
}
