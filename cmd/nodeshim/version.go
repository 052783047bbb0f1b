package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

func newVersionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print nodeshim's version, commit and Go version",
		Example: `  nodeshim version
  nodeshim version -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := versionInfo{
				Version:   version,
				Commit:    commit,
				GoVersion: runtime.Version(),
				Platform:  runtime.GOOS + "/" + runtime.GOARCH,
			}
			return writeOutput(cmd.OutOrStdout(), output, info, func() string {
				return fmt.Sprintf("nodeshim %s (commit %s, %s, %s)\n", info.Version, info.Commit, info.GoVersion, info.Platform)
			})
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

// versionInfo is the machine-readable form of `nodeshim version`.
type versionInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}
