package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/shim/checkpoint/retention"
)

// restoreOutput is the machine-readable form of `nodeshim restore`.
type restoreOutput struct {
	Pid            int     `json:"pid"`
	Archive        string  `json:"archive"`
	WorkDir        string  `json:"workDir,omitempty"`
	UnpackSeconds  float64 `json:"unpackSeconds"`
	RestoreSeconds float64 `json:"restoreSeconds"`
}

func newRestoreCommand() *cobra.Command {
	var (
		rootDir   string
		workRoot  string
		keep      bool
		timeout   time.Duration
		output    string
		criuFlags criuFlags
	)
	cmd := &cobra.Command{
		Use:   "restore ARCHIVE",
		Short: "Restore a process tree from a checkpoint archive",
		Long: `Restore validates a checkpoint archive, unpacks it into a private 0700 work
directory and restores its process tree with CRIU, detached, then prints the
new root pid.

An archive with absolute paths, ".." entries, symlinks that point out of it,
entries other than directories, files and symlinks, or without checkpoint/,
config.dump or spec.dump is refused before anything is unpacked. The
original pids must be free: the checkpointed tree must have exited.`,
		Example: `  nodeshim restore /var/lib/kubelet/checkpoints/checkpoint-pid4242_host-app-2025-01-02T03:04:05Z.tar

  # Keep the unpacked images and restore.log for inspection
  nodeshim restore --keep-work-dir -o json ARCHIVE`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bin, err := criu.Find(criuFlags.path, nil)
			if err != nil {
				return err
			}
			if timeout <= 0 {
				timeout = criu.DefaultTimeout
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			// Retention (nodeshim serve, checkpoint prune) keeps an
			// archive held while it is read.
			release, err := retention.Hold(args[0])
			if err != nil {
				return err
			}
			defer release() //nolint:errcheck // a read-only descriptor
			res, err := criu.Restore(ctx, args[0], criu.RestoreOptions{
				Binary:              bin,
				RootDir:             rootDir,
				WorkRoot:            workRoot,
				KeepWorkDir:         keep,
				TCPEstablished:      criuFlags.tcpEstablished,
				ExtUnixSockets:      criuFlags.extUnixSk,
				FileLocks:           criuFlags.fileLocks,
				ShellJob:            criuFlags.shellJob,
				HardwareBreakpoints: criuFlags.breakpoints,
				Logger:              slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)),
			})
			if err != nil {
				return err
			}
			out := restoreOutput{Pid: res.Pid, Archive: args[0], UnpackSeconds: res.Unpack.Seconds(), RestoreSeconds: res.Restore.Seconds()}
			if keep {
				out.WorkDir = res.WorkDir
			}
			return writeOutput(cmd.OutOrStdout(), output, out, func() string {
				return fmt.Sprintf("%d\n", res.Pid)
			})
		},
	}
	cmd.Flags().StringVar(&rootDir, "root-dir", criu.DefaultRootDir, "kubelet root dir; the work directory is made under <root-dir>/checkpoints")
	cmd.Flags().StringVar(&workRoot, "work-dir", "", "make the private work directory here instead (same rules: 0700, root-owned)")
	cmd.Flags().BoolVar(&keep, "keep-work-dir", false, "keep the unpacked images and restore.log")
	cmd.Flags().DurationVar(&timeout, "timeout", criu.DefaultTimeout, "give up after this long")
	criuFlags.add(cmd)
	addOutputFlag(cmd, &output)
	return cmd
}
