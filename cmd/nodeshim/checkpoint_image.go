package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/criu/image"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/shim/checkpoint/retention"
)

// checkpointImageOutput is the machine-readable form of `nodeshim
// checkpoint image`.
type checkpointImageOutput struct {
	image.Image
	Output       string  `json:"output"`
	TotalSeconds float64 `json:"totalSeconds"`
}

func newCheckpointImageCommand() *cobra.Command {
	var tag, outPath, output string
	var sf sealFlags
	cmd := &cobra.Command{
		Use:   "image ARCHIVE --tag REF --out-file FILE",
		Short: "Turn a checkpoint archive into a checkpoint image (an OCI image archive)",
		Long: `Image writes the checkpoint image of a checkpoint archive as an OCI image
layout archive: one uncompressed layer holding the archive's files, and the
annotations by which each runtime knows a checkpoint image
(io.podman.annotations.checkpoint.*, CRI-O's
io.kubernetes.cri-o.annotations.checkpoint.name and containerd's
org.criu.checkpoint.container.name), taken from the archive's config.dump.
The same archive always gives the same file and digests.

Load it with "podman load -i FILE" (then "podman container restore REF")
or "ctr -n k8s.io images import FILE". The base image the container ran
from must be present where it is restored. The archive is held while it is
read, so retention does not remove it meanwhile. FILE must not exist.
-o/--output is the format of what is printed about the image.`,
		Example: `  nodeshim checkpoint image /var/lib/kubelet/checkpoints/checkpoint-web_podman-web-2026-11-23T12:00:00Z.tar \
    --tag localhost/web-checkpoint:1 --out-file /tmp/web-checkpoint.tar

  # The image's digests and annotations as JSON
  nodeshim checkpoint image ARCHIVE --tag localhost/web-checkpoint:1 --out-file /tmp/web-checkpoint.tar -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tag == "" || outPath == "" {
				return withExitCode(exitUsage, errors.New("give --tag REF and --out-file FILE"))
			}
			start := time.Now()
			_, opening, err := sf.load()
			if err != nil {
				return withExitCode(exitUsage, err)
			}
			img, err := writeCheckpointImage(args[0], tag, outPath, opening)
			if err != nil {
				return err
			}
			out := checkpointImageOutput{Image: img, Output: outPath, TotalSeconds: time.Since(start).Seconds()}
			return writeOutput(cmd.OutOrStdout(), output, out, func() string {
				var b strings.Builder
				tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
				fmt.Fprintf(tw, "IMAGE\tMANIFEST\tSIZE\tFILE\n%s\t%s\t%s\t%s\n", img.Ref, img.Manifest, humanBytes(img.Size), outPath)
				tw.Flush()
				return b.String()
			})
		},
	}
	cmd.Flags().StringVar(&tag, "tag", "", "name of the image, e.g. localhost/web-checkpoint:1")
	cmd.Flags().StringVar(&outPath, "out-file", "", "the OCI image archive to write (must not exist)")
	sf.addRead(cmd.Flags(), false)
	// --output FILE and --format FORMAT are the spellings before -o was
	// the format on every command (podman save's --output is the file).
	addFormatOrFileFlag(cmd, &output, "out-file")
	cmd.Flags().StringVar(&output, "format", "table", outputUsage)
	markDeprecated(cmd.Flags(), "format", "-o/--output")
	return cmd
}

// writeCheckpointImage writes the image of archive to outPath: into a
// new 0600 temp file beside it, synced, then linked to its name, which
// fails rather than replace a file.
func writeCheckpointImage(archive, tag, outPath string, opening seal.OpenOptions) (image.Image, error) {
	release, err := retention.Hold(archive)
	if err != nil {
		return image.Image{}, err
	}
	defer release() //nolint:errcheck // a read-only descriptor
	a, err := os.Open(archive)
	if err != nil {
		return image.Image{}, err
	}
	defer a.Close()
	// The signature is verified before the archive is read; an encrypted
	// archive is refused: its image would hold its plain text.
	sealed, err := seal.Open(a, archive, opening)
	if err != nil {
		return image.Image{}, err
	}
	if sealed.Encrypted {
		return image.Image{}, fmt.Errorf("%s is encrypted: a checkpoint image of it would hold its plain text, and image layer encryption is not supported: %w", archive, errdefs.ErrNotSupported)
	}
	if _, err := os.Lstat(outPath); err == nil {
		return image.Image{}, fmt.Errorf("%s exists: %w", outPath, os.ErrExist)
	}
	tmp, err := os.CreateTemp(filepath.Dir(outPath), ".nodeshim-image-*.tar")
	if err != nil {
		return image.Image{}, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	img, err := image.Write(a, tag, tmp)
	if err != nil {
		return image.Image{}, fmt.Errorf("%s: %w", archive, err)
	}
	if err := tmp.Sync(); err != nil {
		return image.Image{}, fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err := os.Link(tmp.Name(), outPath); err != nil {
		return image.Image{}, fmt.Errorf("write %s: %w", outPath, err)
	}
	if d, err := os.Open(filepath.Dir(outPath)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return img, nil
}
