package main

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/shim/checkpoint"
	"github.com/nodeshim/nodeshim/shim/checkpoint/retention"
	"github.com/nodeshim/nodeshim/shim/config"
)

func newCheckpointPruneCommand() *cobra.Command {
	var (
		source          string
		dir             string
		rootDir         string
		dryRun          bool
		maxPerContainer int32
		maxBytes        string
		maxAge          time.Duration
		output          string
	)
	cmd := &cobra.Command{
		Use:   "prune [--dry-run]",
		Short: "Remove the checkpoint archives the retention policy does not keep",
		Long: `Prune applies checkpoint.retention of the ShimConfiguration to the
checkpoint directory, as nodeshim serve does at start and after every
checkpoint: archives older than maxAge go first, then all but the newest
maxPerContainer of each container, then the oldest until the rest fit in
maxBytes. An archive held by a restore or an image being built is kept.

Each archive is renamed into the directory's .nodeshim-trash and then
unlinked, so an interrupted prune leaves no half-removed archive: the
next prune, or the next start of nodeshim serve, empties the trash.

The policy is read from --config-source (the directory nodeshim serve
reads), else nodeshim's defaults; the flags override it.

The directory is --dir; else, with --config-source, the configuration's
checkpoint.dir, where that nodeshim serve writes the archives of pods'
containers; else <root-dir>/checkpoints, where "nodeshim checkpoint --pid"
and "--container-id" write (/var/lib/kubelet/checkpoints by default).`,
		Example: `  # What would go, without removing anything
  nodeshim checkpoint prune --dry-run

  # Keep 3 archives per container and at most 20 GiB in all
  nodeshim checkpoint prune --max-per-container 3 --max-bytes 20Gi

  # The archives of the nodeshim serve that reads /etc/nodeshim
  nodeshim checkpoint prune --config-source /etc/nodeshim --dry-run`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := config.Defaults()
			if source != "" {
				p, err := config.ReadSource(source)
				if err != nil {
					return err
				}
				if cfg, err = p.Load(); err != nil {
					return err
				}
			}
			r := cfg.Checkpoint.Retention
			f := cmd.Flags()
			if f.Changed("max-per-container") {
				r.MaxPerContainer = maxPerContainer
			}
			if f.Changed("max-bytes") {
				q, err := resource.ParseQuantity(maxBytes)
				if err != nil {
					return withExitCode(exitUsage, fmt.Errorf("--max-bytes %q: %w", maxBytes, err))
				}
				r.MaxBytes = &q
			}
			if f.Changed("max-age") {
				r.MaxAge.Duration = maxAge
			}
			dir = pruneDir(dir, rootDir, source, cfg.Checkpoint.Dir)
			logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			res, err := retention.Apply(dir, checkpoint.RetentionPolicy(r), time.Now(), retention.ApplyOptions{
				DryRun: dryRun,
				// The work entries of checkpoints that hold a lock of
				// the nodeshim serve's root dir are in use.
				Owners: retention.Owners{LockDir: filepath.Join(cfg.RootDir, retention.LockDirName)},
				Removed: func(rm retention.Removal) {
					if !dryRun {
						logger.Info("checkpoint archive removed", "archive", rm.Name, "reason", rm.Reason, "bytes", rm.Size)
					}
				},
				RemovedLeftover: func(w retention.Leftover) {
					if !dryRun {
						logger.Info("removed the work files of a killed checkpoint or restore", "entry", w.Name, "bytes", w.Size, "why", w.Why)
					}
				},
			})
			if len(res.Swept) > 0 {
				logger.Info("finished removing checkpoint archives of an interrupted prune", "archives", res.Swept)
			}
			if werr := writeOutput(cmd.OutOrStdout(), output, res, func() string {
				var b strings.Builder
				tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
				fmt.Fprintln(tw, "ARCHIVE\tSIZE\tACTION")
				verb := "removed"
				if dryRun {
					verb = "would remove"
				}
				for _, rm := range res.Removed {
					fmt.Fprintf(tw, "%s\t%s\t%s (%s)\n", rm.Name, humanBytes(rm.Size), verb, rm.Reason)
				}
				for _, rm := range res.Skipped {
					fmt.Fprintf(tw, "%s\t%s\tkept: in use (%s)\n", rm.Name, humanBytes(rm.Size), rm.Reason)
				}
				for _, a := range res.Kept {
					fmt.Fprintf(tw, "%s\t%s\tkept\n", a.Name, humanBytes(a.Size))
				}
				for _, w := range res.Leftovers {
					fmt.Fprintf(tw, "%s\t%s\t%s (left over: %s)\n", w.Name, humanBytes(w.Size), verb, w.Why)
				}
				for _, w := range res.Working {
					fmt.Fprintf(tw, "%s\t%s\tkept: in use (%s)\n", w.Name, humanBytes(w.Size), w.Why)
				}
				tw.Flush()
				return b.String()
			}); werr != nil {
				return werr
			}
			return err
		},
	}
	cmd.Flags().StringVar(&source, "config-source", "", "directory holding config.yaml and *.conf drop-ins, as for nodeshim serve; empty for the defaults")
	cmd.Flags().StringVar(&dir, "dir", "", "checkpoint directory (default: checkpoint.dir of --config-source's configuration, else <root-dir>/checkpoints)")
	cmd.Flags().StringVar(&rootDir, "root-dir", criu.DefaultRootDir, "kubelet root dir, as for nodeshim checkpoint: without --dir or --config-source, prune <root-dir>/checkpoints")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be removed, remove nothing")
	cmd.Flags().Int32Var(&maxPerContainer, "max-per-container", 0, "archives kept per container (overrides checkpoint.retention.maxPerContainer; negative: all)")
	cmd.Flags().StringVar(&maxBytes, "max-bytes", "", "total size kept, a quantity such as 20Gi (overrides checkpoint.retention.maxBytes; 0: no bound)")
	cmd.Flags().DurationVar(&maxAge, "max-age", 0, "remove archives older than this (overrides checkpoint.retention.maxAge; 0: keep)")
	addOutputFlag(cmd, &output)
	return cmd
}

// pruneDir is the directory prune works on: dir (--dir), else, with a
// configuration source, the configuration's checkpoint.dir (configured),
// where that nodeshim serve writes, else <rootDir>/checkpoints, where
// nodeshim checkpoint --pid and --container-id write.
func pruneDir(dir, rootDir, source, configured string) string {
	switch {
	case dir != "":
		return dir
	case source != "":
		return configured
	default:
		return filepath.Join(rootDir, criu.CheckpointsDir)
	}
}
