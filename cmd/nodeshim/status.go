package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeshim/nodeshim/shim/api"
	"github.com/nodeshim/nodeshim/shim/client"
	"github.com/nodeshim/nodeshim/shim/config"
	"github.com/nodeshim/nodeshim/shim/status"
)

func newStatusCommand() *cobra.Command {
	var rootDir, output string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print the node status served by a running nodeshim serve",
		Long: `Print the conditions that nodeshim serve reports, with the capability
report's summary, the node's PSI, recent OOM kills, recent checkpoints and the
configuration status, read from its API socket (<root-dir>/nodeshim.sock).
It gives up after --timeout: a shim that does not answer within it is stuck
or its API saturated.`,
		Example: `  # Conditions as a table
  nodeshim status

  # Everything as JSON
  nodeshim status -o json

  # Wait at most 3 seconds for the answer
  nodeshim status --timeout 3s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			d, err := client.New(filepath.Join(rootDir, api.SocketName), client.WithTimeout(timeout)).Status(ctx)
			if err != nil {
				return err
			}
			return writeOutput(cmd.OutOrStdout(), output, d, func() string { return statusTable(d) })
		},
	}
	cmd.Flags().StringVar(&rootDir, "root-dir", "/var/lib/nodeshim", "root dir of the nodeshim serve to query")
	cmd.Flags().DurationVar(&timeout, "timeout", client.DefaultTimeout, "how long to wait for the answer, connecting included")
	addOutputFlag(cmd, &output)
	return cmd
}

func statusTable(d status.Document) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TYPE\tSTATUS\tSEVERITY\tREASON\tMESSAGE")
	for _, c := range d.Conditions {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Severity, c.Reason, c.Message)
	}
	w.Flush()
	if r := d.Report; r != nil {
		fmt.Fprintf(&b, "\nreport: kernel %s at %s: %d requirements, %d supported, %d degraded, %d unsupported, %d unknown\n",
			r.KernelRelease, r.GeneratedAt.UTC().Format(time.RFC3339), r.Summary.Total, r.Summary.Supported, r.Summary.Degraded, r.Summary.Unsupported, r.Summary.Unknown)
	}
	if p := d.Pressure; p != nil {
		var psi []string
		for _, r := range p.PSI {
			if r.Unknown == "" {
				psi = append(psi, fmt.Sprintf("%s some avg10=%.2f%%", r.Resource, r.Some.Avg10))
			}
		}
		fmt.Fprintf(&b, "pressure: %s\n", strings.Join(psi, ", "))
	}
	if o := d.OOMKills; o.Watching {
		fmt.Fprintf(&b, "OOM kills: %d since start (watching %s)\n", o.Total, o.Hook)
		for _, k := range o.Recent[max(0, len(o.Recent)-5):] {
			fmt.Fprintf(&b, "  %s pid %d %s rss %s\n", k.Time.UTC().Format(time.RFC3339), k.TGID, k.Comm, humanBytes(int64(k.RSSBytes)))
		}
	} else {
		fmt.Fprintf(&b, "OOM kills: not watched: %s\n", o.Reason)
	}
	for _, c := range d.Checkpoints[max(0, len(d.Checkpoints)-5):] {
		what := c.Path
		if c.Error != "" {
			what = c.Error
		}
		fmt.Fprintf(&b, "checkpoint %s %s/%s/%s %s in %.2fs: %s\n", c.StartedAt.UTC().Format(time.RFC3339), c.Namespace, c.Pod, c.Container, c.Result, c.DurationSeconds, what)
	}
	if cfg := d.Config; cfg != nil {
		fmt.Fprintf(&b, "\nconfig: assigned %s, active %s, last-known-good %s\n",
			refName(cfg.Assigned), refName(cfg.Active), refName(cfg.LastKnownGood))
		if cfg.Error != "" {
			fmt.Fprintf(&b, "config error: %s\n", cfg.Error)
		}
	}
	return b.String()
}

// refName shows a configuration payload by its short uid; none is the
// local defaults.
func refName(r *config.SourceRef) string {
	if r == nil {
		return "local defaults"
	}
	if len(r.UID) > 12 {
		return r.UID[:12]
	}
	return r.UID
}
