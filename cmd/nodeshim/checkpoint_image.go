package main

import (
	"bufio"
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
	var encryptionKeys []string
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
-o/--output is the format of what is printed about the image.

--encryption-key jwe:PUBLIC.pem (repeatable; RSA or EC public keys, as
podman and skopeo spell it) encrypts the layer with OCI image layer
encryption: only the holders of the private keys can load it ("podman pull
--decryption-key KEY.pem oci-archive:FILE", then "podman container restore
REF"). An encrypted archive needs --identity to be read, and an image of it
must be encrypted: its plain text is decrypted into memory only, never
written out. --signing-key signs the image's manifest as this node
(checked by "nodeshim checkpoint image verify").`,
		Example: `  nodeshim checkpoint image /var/lib/kubelet/checkpoints/checkpoint-web_podman-web-2026-11-23T12:00:00Z.tar \
    --tag localhost/web-checkpoint:1 --out-file /tmp/web-checkpoint.tar

  # The image's digests and annotations as JSON
  nodeshim checkpoint image ARCHIVE --tag localhost/web-checkpoint:1 --out-file /tmp/web-checkpoint.tar -o json

  # An encrypted archive into an image encrypted to node-b, signed by this node
  nodeshim checkpoint image ARCHIVE --identity /etc/nodeshim/keys --trust-policy /etc/nodeshim/trust.yaml \
    --encryption-key jwe:/etc/nodeshim/node-b.pub.pem --signing-key /etc/nodeshim/node.key \
    --tag localhost/web-checkpoint:1 --out-file /tmp/web-checkpoint.tar`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tag == "" || outPath == "" {
				return withExitCode(exitUsage, errors.New("give --tag REF and --out-file FILE"))
			}
			start := time.Now()
			writing, opening, err := sf.load()
			if err != nil {
				return withExitCode(exitUsage, err)
			}
			o := image.Options{Signer: writing.Signer}
			for _, k := range encryptionKeys {
				r, err := image.ParseRecipient(k)
				if err != nil {
					return withExitCode(exitUsage, fmt.Errorf("--encryption-key: %w", err))
				}
				o.Recipients = append(o.Recipients, r)
			}
			img, err := writeSealedCheckpointImage(args[0], tag, outPath, opening, o)
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
	sf.addRead(cmd.Flags(), true)
	cmd.Flags().StringArrayVar(&encryptionKeys, "encryption-key", nil, "encrypt the image's layer to this public key, jwe:/path/to/public.pem (RSA or EC); repeatable")
	cmd.Flags().StringVar(&sf.c.SigningKey, "signing-key", "", "sign the image's manifest with this ed25519 key (PEM PKCS #8 file)")
	cmd.Flags().StringVar(&sf.c.Node, "node-name", "", "node name recorded in the image's signature (default: the host name)")
	cmd.AddCommand(newCheckpointImageVerifyCommand())
	// --output FILE and --format FORMAT are the spellings before -o was
	// the format on every command (podman save's --output is the file).
	addFormatOrFileFlag(cmd, &output, "out-file")
	cmd.Flags().StringVar(&output, "format", "table", outputUsage)
	markDeprecated(cmd.Flags(), "format", "-o/--output")
	return cmd
}

// writeCheckpointImage writes the plain, unsigned image of archive to
// outPath (writeSealedCheckpointImage).
func writeCheckpointImage(archive, tag, outPath string, opening seal.OpenOptions) (image.Image, error) {
	return writeSealedCheckpointImage(archive, tag, outPath, opening, image.Options{})
}

// writeSealedCheckpointImage writes the image of archive, sealed as o
// says, to outPath: into a new 0600 temp file beside it, synced, then
// linked to its name, which fails rather than replace a file. An
// encrypted archive is read through its decryption in memory, and only
// into an encrypted image.
func writeSealedCheckpointImage(archive, tag, outPath string, opening seal.OpenOptions, o image.Options) (image.Image, error) {
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
	// The signature is verified and, for an encrypted archive, the file
	// key unwrapped before the archive is read.
	sealed, err := seal.Open(a, archive, opening)
	if err != nil {
		return image.Image{}, err
	}
	var src image.Archive = a
	if sealed.Encrypted {
		if len(o.Recipients) == 0 {
			return image.Image{}, fmt.Errorf("%s is encrypted: a plain checkpoint image of it would hold its plain text; give --encryption-key: %w", archive, errdefs.ErrNotSupported)
		}
		// Random access decrypts chunk by chunk into memory: the plain
		// tar never reaches a file.
		if src, err = sealed.Reader(); err != nil {
			return image.Image{}, err
		}
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
	img, err := image.WriteWith(src, tag, tmp, o)
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

// checkpointImageVerifyOutput is the machine-readable form of `nodeshim
// checkpoint image verify`.
type checkpointImageVerifyOutput struct {
	File   string `json:"file"`
	Signed bool   `json:"signed"`
	Node   string `json:"node,omitempty"`
	KeyID  string `json:"keyID,omitempty"`
}

func newCheckpointImageVerifyCommand() *cobra.Command {
	var policyPath, output string
	cmd := &cobra.Command{
		Use:   "verify FILE --trust-policy POLICY",
		Short: "Verify a checkpoint image archive's signature against a trust policy",
		Long: `Verify checks an OCI image archive that "nodeshim checkpoint image" wrote
before it is loaded: the signature of its manifest by a key the trust
policy trusts for the signing node, and the digest of every blob the
manifest names (an encrypted layer is checked as it is, without a key).
Exit code 0: verified; 1: refused, saying why.`,
		Example: `  nodeshim checkpoint image verify /tmp/web-checkpoint.tar --trust-policy /etc/nodeshim/trust.yaml

  # then, on the node that holds the private key:
  #   podman pull --decryption-key /etc/nodeshim/node.pem oci-archive:/tmp/web-checkpoint.tar`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if policyPath == "" {
				return withExitCode(exitUsage, errors.New("give --trust-policy POLICY"))
			}
			p, err := seal.LoadPolicy(policyPath)
			if err != nil {
				return withExitCode(exitUsage, fmt.Errorf("--trust-policy: %w", err))
			}
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			sig, err := image.Verify(bufio.NewReaderSize(f, 1<<20), args[0], p)
			if err != nil {
				return err
			}
			out := checkpointImageVerifyOutput{File: args[0], Signed: sig != nil}
			if sig != nil {
				out.Node, out.KeyID = sig.Node, sig.KeyID
			}
			return writeOutput(cmd.OutOrStdout(), output, out, func() string {
				if sig == nil {
					return fmt.Sprintf("%s: unsigned, allowed by the trust policy\n", args[0])
				}
				return fmt.Sprintf("%s: signed by node %s (key %s)\n", args[0], sig.Node, sig.KeyID)
			})
		},
	}
	cmd.Flags().StringVar(&policyPath, "trust-policy", "", "the trust policy file the signature must satisfy")
	cmd.Flags().StringVarP(&output, "output", "o", "table", outputUsage)
	return cmd
}
