package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/pod"
	"github.com/nodeshim/nodeshim/shim/client"
)

// podCheckpointOutput is what `nodeshim checkpoint --namespace NS --pod
// POD` prints: the pod checkpoint and its manifest's times.
type podCheckpointOutput struct {
	Path          string   `json:"path"`
	Pod           string   `json:"pod"`
	SizeBytes     int64    `json:"sizeBytes"`
	FrozenSeconds float64  `json:"frozenSeconds"`
	TotalSeconds  float64  `json:"totalSeconds"`
	Containers    []string `json:"containers"`
	// Manifest is the pod checkpoint's manifest.json.
	Manifest pod.Manifest `json:"manifest"`
}

// checkpointPodThroughDaemon asks the nodeshim serve on f.socket to
// checkpoint every container of the pod f names, and prints the pod
// checkpoint it wrote.
func checkpointPodThroughDaemon(cmd *cobra.Command, f *checkpointFlags) error {
	// A flag of another kind of target is named first: "--pid 1 --pod p"
	// is two targets, not a pod without its namespace.
	for _, name := range []string{"pid", "container-id", "image-file", "lazy", "pre-dump", "root-dir", "criu-path", "tcp-established", "ext-unix-sk", "file-locks", "shell-job", "hardware-breakpoints"} {
		if fl := cmd.Flags().Lookup(name); fl != nil && fl.Changed {
			return withExitCode(exitUsage, fmt.Errorf("--%s does not apply to a pod checkpoint: the nodeshim serve checkpoints pods with its own configuration", name))
		}
	}
	if f.ref.Namespace == "" {
		return withExitCode(exitUsage, errors.New("a pod needs --namespace and --pod"))
	}
	wait := f.timeout
	if wait <= 0 {
		wait = criu.DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), wait+30*time.Second)
	defer cancel()
	start := time.Now()
	name := f.ref.Namespace + "/" + f.ref.Pod
	path, err := client.New(f.socket).CheckpointPod(ctx, f.ref.Namespace, f.ref.Pod, f.timeout, f.imageRef)
	if err != nil {
		return fmt.Errorf("checkpoint pod %s: %w", name, err)
	}
	out := podCheckpointOutput{Path: path, Pod: name, TotalSeconds: time.Since(start).Seconds()}
	m, err := pod.ReadManifest(path)
	if err != nil {
		return err
	}
	out.Manifest = m
	out.FrozenSeconds = m.ThawedAt.Sub(m.FrozenAt).Seconds()
	for _, c := range m.Containers {
		out.SizeBytes += c.Size
		out.Containers = append(out.Containers, c.Name)
	}
	return writeOutput(cmd.OutOrStdout(), f.output, out, func() string {
		var b strings.Builder
		tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
		fmt.Fprintf(tw, "POD CHECKPOINT\tCONTAINERS\tSIZE\tFROZEN\tTOTAL\n%s\t%s\t%s\t%s\t%s\n", path, strings.Join(out.Containers, ","),
			humanBytes(out.SizeBytes), m.ThawedAt.Sub(m.FrozenAt).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		tw.Flush()
		return b.String()
	})
}
