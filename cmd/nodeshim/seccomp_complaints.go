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
	"github.com/nodeshim/nodeshim/shim/status"
)

func newSeccompComplaintsCommand() *cobra.Command {
	var rootDir, output string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "complaints",
		Short: "List what complain-mode profiles would have denied, per container and syscall",
		Long: `List the syscalls that containers under complain-mode seccomp profiles
(seccompComplain in the configuration) made and their profiles would deny,
counted per container and syscall since nodeshim serve started, as served by
its API socket (the seccompComplaints of GET /status).

A process that exited before nodeshim read its record is listed by its command
name without a container. When serve reads the kernel log (without
CAP_AUDIT_READ for the audit netlink group) and the log dropped records (its
printk rate limit), the counts are a lower bound; the first line says how many.`,
		Example: `  # What would be denied, per container
  nodeshim seccomp complaints

  # As JSON, with first and last times
  nodeshim seccomp complaints -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			d, err := client.New(filepath.Join(rootDir, api.SocketName), client.WithTimeout(timeout)).Status(ctx)
			if err != nil {
				return err
			}
			c := d.SeccompComplaints
			if c == nil {
				c = &status.SeccompComplaints{Reason: "the complaints source has not reported", Containers: []status.ContainerComplaints{}}
			}
			return writeOutput(cmd.OutOrStdout(), output, c, func() string { return complaintsTable(c) })
		},
	}
	cmd.Flags().StringVar(&rootDir, "root-dir", "/var/lib/nodeshim", "root dir of the nodeshim serve to query")
	cmd.Flags().DurationVar(&timeout, "timeout", client.DefaultTimeout, "how long to wait for the answer, connecting included")
	addOutputFlag(cmd, &output)
	return cmd
}

func complaintsTable(c *status.SeccompComplaints) string {
	var b strings.Builder
	if !c.Watching {
		fmt.Fprintf(&b, "not watched: %s\n", c.Reason)
	}
	fmt.Fprintf(&b, "%d would-be denials, %d records suppressed by the kernel log\n", c.Total, c.Suppressed)
	if len(c.Containers) == 0 {
		return b.String()
	}
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAMESPACE\tPOD\tCONTAINER\tSYSCALL\tCOUNT\tLAST")
	for _, r := range c.Containers {
		ns, pod, ctr := r.Namespace, r.Pod, r.Container
		if r.ContainerID == "" {
			ns, pod, ctr = "-", "-", "("+r.Comm+", no container)"
		}
		for _, s := range r.Syscalls {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\n", ns, pod, ctr, s.Name, s.Count, s.Last.UTC().Format(time.RFC3339))
		}
	}
	w.Flush()
	return b.String()
}
