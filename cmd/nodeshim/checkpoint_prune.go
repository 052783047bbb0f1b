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
	"github.com/nodeshim/nodeshim/criu/workentry"
	"github.com/nodeshim/nodeshim/shim/checkpoint"
	"github.com/nodeshim/nodeshim/shim/checkpoint/retention"
	"github.com/nodeshim/nodeshim/shim/config"
)

// pruneFlags are the flags of `nodeshim checkpoint prune`.
type pruneFlags struct {
	source          string
	dir             string
	rootDir         string
	dryRun          bool
	maxPerContainer int32
	maxBytes        string
	maxAge          time.Duration
	output          string
}

func (f *pruneFlags) bind(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.source, "config-source", "", "directory holding config.yaml and *.conf drop-ins, as for nodeshim serve; empty for the defaults")
	fl.StringVar(&f.dir, "dir", "", "checkpoint directory (default: checkpoint.dir of --config-source's configuration, else <root-dir>/checkpoints)")
	fl.StringVar(&f.rootDir, "root-dir", criu.DefaultRootDir, "kubelet root dir, as for nodeshim checkpoint: without --dir or --config-source, prune <root-dir>/checkpoints")
	fl.BoolVar(&f.dryRun, "dry-run", false, "list what would be removed, remove nothing")
	fl.Int32Var(&f.maxPerContainer, "max-per-container", 0, "archives kept per container (overrides checkpoint.retention.maxPerContainer; negative: all)")
	fl.StringVar(&f.maxBytes, "max-bytes", "", "total size kept, a quantity such as 20Gi (overrides checkpoint.retention.maxBytes; 0: no bound)")
	fl.DurationVar(&f.maxAge, "max-age", 0, "remove archives older than this (overrides checkpoint.retention.maxAge; 0: keep)")
	addOutputFlag(cmd, &f.output)
}

const pruneLong = `Prune applies checkpoint.retention of the ShimConfiguration to the
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
and "--container-id" write (/var/lib/kubelet/checkpoints by default).`

const pruneExample = `  # What would go, without removing anything
  nodeshim checkpoint prune --dry-run

  # Keep 3 archives per container and at most 20 GiB in all
  nodeshim checkpoint prune --max-per-container 3 --max-bytes 20Gi

  # The archives of the nodeshim serve that reads /etc/nodeshim
  nodeshim checkpoint prune --config-source /etc/nodeshim --dry-run`

func newCheckpointPruneCommand() *cobra.Command {
	var f pruneFlags
	cmd := &cobra.Command{
		Use:     "prune [--dry-run]",
		Short:   "Remove the checkpoint archives the retention policy does not keep",
		Long:    pruneLong,
		Example: pruneExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runPrune(cmd, &f)
		},
	}
	f.bind(cmd)
	return cmd
}

// pruneConfig is the configuration prune applies: --config-source's, else
// the defaults, with the retention flags given on the command line over
// it.
func (f *pruneFlags) pruneConfig(cmd *cobra.Command) (config.ShimConfiguration, error) {
	cfg := config.Defaults()
	if f.source != "" {
		p, err := config.ReadSource(f.source)
		if err != nil {
			return cfg, err
		}
		if cfg, err = p.Load(); err != nil {
			return cfg, err
		}
	}
	r := &cfg.Checkpoint.Retention
	fl := cmd.Flags()
	if fl.Changed("max-per-container") {
		r.MaxPerContainer = f.maxPerContainer
	}
	if fl.Changed("max-bytes") {
		q, err := resource.ParseQuantity(f.maxBytes)
		if err != nil {
			return cfg, withExitCode(exitUsage, fmt.Errorf("--max-bytes %q: %w", f.maxBytes, err))
		}
		r.MaxBytes = &q
	}
	if fl.Changed("max-age") {
		r.MaxAge.Duration = f.maxAge
	}
	return cfg, nil
}

func runPrune(cmd *cobra.Command, f *pruneFlags) error {
	cfg, err := f.pruneConfig(cmd)
	if err != nil {
		return err
	}
	r := cfg.Checkpoint.Retention
	dir := pruneDir(f.dir, f.rootDir, f.source, cfg.Checkpoint.Dir)
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	res, err := retention.Apply(dir, checkpoint.RetentionPolicy(r), time.Now(), retention.ApplyOptions{
		DryRun: f.dryRun,
		// The work entries of checkpoints that hold a lock of
		// the nodeshim serve's root dir are in use.
		Owners: workentry.Owners{LockDir: filepath.Join(cfg.RootDir, workentry.LockDirName)},
		Removed: func(rm retention.Removal) {
			if !f.dryRun {
				logger.Info("checkpoint archive removed", "archive", rm.Name, "reason", rm.Reason, "bytes", rm.Size)
			}
		},
		RemovedLeftover: func(w retention.Leftover) {
			if !f.dryRun {
				logger.Info("removed the work files of a killed checkpoint or restore", "entry", w.Name, "bytes", w.Size, "why", w.Why)
			}
		},
	})
	if len(res.Swept) > 0 {
		logger.Info("finished removing checkpoint archives of an interrupted prune", "archives", res.Swept)
	}
	if werr := writeOutput(cmd.OutOrStdout(), f.output, res, func() string { return pruneTable(res, f.dryRun) }); werr != nil {
		return werr
	}
	return err
}

// pruneTable is the human form of what prune did, or would do.
func pruneTable(res retention.Result, dryRun bool) string {
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
