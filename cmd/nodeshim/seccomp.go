package main

import (
	"github.com/spf13/cobra"
)

// newSeccompCommand is the `nodeshim seccomp` group: validate, compile,
// verify and install seccomp profiles (package kernel/seccomp). Other
// seccomp subcommands (for example `seccomp record`) attach to this group.
func newSeccompCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "seccomp",
		Short: "Validate, compile, verify and install seccomp profiles",
		Long: `Work with the seccomp profiles that Kubernetes containers run under.

Profiles are OCI runtime-spec seccomp JSON (what a Localhost profile under
<kubelet root-dir>/seccomp contains) or the Docker/moby profile shape, which is
resolved for this node (architecture, capabilities, kernel version) first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	return cmd
}
