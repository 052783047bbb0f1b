// Package image turns a checkpoint archive into a checkpoint image: an OCI
// image whose one layer is the archive's contents, marked by the
// annotations with which podman, CRI-O and containerd recognise a
// checkpoint to restore, written as an OCI image layout archive that
// `podman load` and `ctr images import` accept.
package image

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/nodeshim/nodeshim/criu/archive"
	"github.com/nodeshim/nodeshim/criu/archive/seal"
)

// The annotations of a checkpoint image, as each runtime reads them.
const (
	// Podman (libpod/define/annotations.go): runtime.name marks the image
	// as a checkpoint, and podman refuses one whose runtime differs from
	// its own.
	PodmanName            = "io.podman.annotations.checkpoint.name"
	PodmanRawImageName    = "io.podman.annotations.checkpoint.rawImageName"
	PodmanRootfsImageID   = "io.podman.annotations.checkpoint.rootfsImageID"
	PodmanRootfsImageName = "io.podman.annotations.checkpoint.rootfsImageName"
	PodmanRuntimeName     = "io.podman.annotations.checkpoint.runtime.name"
	PodmanHostArch        = "io.podman.annotations.checkpoint.host.arch"
	// CRIOName is CRI-O's checkpoint image marker
	// (pkg/annotations CheckpointAnnotationName).
	CRIOName = "io.kubernetes.cri-o.annotations.checkpoint.name"
	// CRIUName and CRIURootfsImageName are the checkpoint-restore
	// project's names (checkpointctl's metadata), which containerd's CRI
	// plugin reads.
	CRIUName            = "org.criu.checkpoint.container.name"
	CRIURootfsImageName = "org.criu.checkpoint.rootfsImageName"
	// ContainerdImageName names the image for `ctr images import`.
	ContainerdImageName = "io.containerd.image.name"
	// SignatureAnnotation, on the index's descriptor of the manifest,
	// holds the signing node's signature of the manifest: base64 of a
	// seal signature file (criu/archive/seal) whose digest and size are
	// the manifest blob's. The manifest names the config and the layer by
	// digest, so the signature covers the whole image.
	SignatureAnnotation = "io.nodeshim.checkpoint.signature"
)

// Image describes a written checkpoint image.
type Image struct {
	// Ref is the image's name.
	Ref string `json:"ref"`
	// Manifest is the manifest's digest, the image's identity.
	Manifest digest.Digest `json:"manifest"`
	// Layer is the layer blob's digest.
	Layer digest.Digest `json:"layer"`
	// DiffID is the plain layer's digest (the config's diff_id): Layer
	// too unless the layer is encrypted.
	DiffID digest.Digest `json:"diffID"`
	// Size is the layer's size in bytes.
	Size int64 `json:"size"`
	// Annotations are the manifest's annotations.
	Annotations map[string]string `json:"annotations"`
	// Encrypted says the layer is encrypted (OCI image layer encryption).
	Encrypted bool `json:"encrypted,omitempty"`
	// SignedBy is the key id of the manifest's signature, if signed.
	SignedBy string `json:"signedBy,omitempty"`
}

// ErrNotCheckpoint is returned, wrapped, for an archive without the
// metadata a checkpoint image needs.
var ErrNotCheckpoint = errors.New("not a checkpoint archive")

// Archive is what Write reads: the archive's bytes, from the start at
// each pass (an *os.File).
type Archive interface {
	io.ReaderAt
	io.Reader
	io.Seeker
}

// Options say how WriteWith seals a checkpoint image. The zero value
// writes a plain, unsigned image (Write).
type Options struct {
	// Recipients, when any, encrypt the layer to them with OCI image
	// layer encryption (ocicrypt's JWE scheme): the image is then
	// usable only where one of their private keys is given.
	Recipients []Recipient
	// Signer, when set, signs the image's manifest as this node
	// (SignatureAnnotation on the index's descriptor of it).
	Signer *seal.Signer
	// Now is the clock of the signature; nil means time.Now.
	Now func() time.Time
}

// Write validates the checkpoint archive a (archive.Validate, and
// archive.ReadMeta for the values of its metadata) and
// writes to out an OCI image layout archive of the checkpoint image ref:
// one uncompressed layer holding the archive's entries (config.dump
// without the paths of the node it was taken on, see portableConfig, and
// a status.dump built from config.dump when the archive has none), a
// config and a
// manifest carrying the runtimes' checkpoint annotations taken from the
// archive's config.dump, and an index naming ref. Everything in it is
// derived from the archive, so the same archive gives the same bytes and
// the same digests. Before anything is written, the layer's size is
// checked against the free space of out's filesystem when out is a file:
// a refusal wraps archive.ErrTooLarge and names the bound.
func Write(a Archive, ref string, out io.Writer) (Image, error) {
	return WriteWith(a, ref, out, Options{})
}

// WriteWith writes the checkpoint image of a as Write does, sealed as o
// says. With recipients, the layer is encrypted (MediaTypeLayerEncrypted,
// with the key options wrapped to each recipient in
// AnnotationKeysJWE): its plain bytes exist only as they stream from a
// to the cipher, never in out, and the config's diff_ids name the plain
// layer, which the decrypting side checks. An encrypted image takes a
// fresh key each time, so its bytes differ from one write to the next.
// With a signer, the manifest is signed (Verify checks it).
func WriteWith(a Archive, ref string, out io.Writer, o Options) (Image, error) {
	if ref == "" {
		return Image{}, errors.New("checkpoint image: empty image name")
	}
	if err := archive.CheckImageRef("checkpoint image", "name", ref); err != nil {
		return Image{}, err
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if _, err := a.Seek(0, io.SeekStart); err != nil {
		return Image{}, fmt.Errorf("checkpoint image: %w", err)
	}
	meta, err := readMetadata(a)
	if err != nil {
		return Image{}, err
	}
	if _, err := a.Seek(0, io.SeekStart); err != nil {
		return Image{}, fmt.Errorf("checkpoint image: %w", err)
	}
	entries, err := archive.Validate(a)
	if err != nil {
		return Image{}, fmt.Errorf("checkpoint image: %w", err)
	}
	if _, err := a.Seek(0, io.SeekStart); err != nil {
		return Image{}, fmt.Errorf("checkpoint image: %w", err)
	}
	if _, err := archive.ReadMeta(a); err != nil {
		return Image{}, fmt.Errorf("checkpoint image: %w", err)
	}
	if free, ok := freeBytes(out); ok {
		if need := layerBound(entries); need > free {
			return Image{}, fmt.Errorf("checkpoint image: %w: the layer takes up to %d bytes, more than the %d bytes free where it is written", archive.ErrTooLarge, need, free)
		}
	}
	status, err := meta.status()
	if err != nil {
		return Image{}, err
	}
	write := func(w io.Writer) error { return writeLayer(a, w, meta.portableConfig, status) }
	var cipher *layerCipher
	if len(o.Recipients) > 0 {
		if cipher, err = newLayerCipher(); err != nil {
			return Image{}, fmt.Errorf("checkpoint image: layer key: %w", err)
		}
	}
	// The layer is written twice, the same bytes each time: once to learn
	// its digest, which names it in the image archive, then into it.
	layer, diffID, err := describeLayer(write, cipher, o.Recipients)
	if err != nil {
		return Image{}, err
	}

	ann := meta.annotations(ref)
	created := meta.CheckpointedAt
	cfg := ocispec.Image{
		Platform: ocispec.Platform{Architecture: runtime.GOARCH, OS: "linux"},
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{diffID}},
		History:  []ocispec.History{{CreatedBy: "nodeshim checkpoint image", Comment: "checkpoint of " + meta.Name}},
	}
	if !created.IsZero() {
		cfg.Created = &created
		cfg.History[0].Created = &created
	}
	cfgBlob, cfgDesc, err := blob(ocispec.MediaTypeImageConfig, cfg)
	if err != nil {
		return Image{}, err
	}
	man := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: cfgDesc, Layers: []ocispec.Descriptor{layer}, Annotations: ann}
	manBlob, manDesc, err := blob(ocispec.MediaTypeImageManifest, man)
	if err != nil {
		return Image{}, err
	}
	// containerd looks for its annotation on the manifest or on the
	// index's descriptor of it; the image names go on the descriptor.
	manDesc.Annotations = map[string]string{ocispec.AnnotationRefName: ref, ContainerdImageName: ref, CRIUName: ann[CRIUName]}
	manDesc.Platform = &cfg.Platform
	img := Image{Ref: ref, Manifest: manDesc.Digest, Layer: layer.Digest, DiffID: diffID, Size: layer.Size, Annotations: ann, Encrypted: cipher != nil}
	if o.Signer != nil {
		sig, err := seal.NewSignature(*o.Signer, sha256.Sum256(manBlob), int64(len(manBlob)), cipher != nil, o.Now())
		if err != nil {
			return Image{}, fmt.Errorf("checkpoint image: sign: %w", err)
		}
		manDesc.Annotations[SignatureAnnotation] = base64.StdEncoding.EncodeToString(sig.Marshal())
		img.SignedBy = sig.KeyID
	}
	idx := ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{manDesc}}
	idxBlob, err := json.Marshal(idx)
	if err != nil {
		return Image{}, fmt.Errorf("checkpoint image: encode index: %w", err)
	}
	layout, err := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	if err != nil {
		return Image{}, fmt.Errorf("checkpoint image: encode layout: %w", err)
	}

	tw := tar.NewWriter(out)
	for _, e := range []struct {
		name string
		data []byte
	}{
		{ocispec.ImageLayoutFile, layout},
		{ocispec.ImageIndexFile, idxBlob},
		{"blobs/", nil},
		{"blobs/sha256/", nil},
		{blobPath(cfgDesc.Digest), cfgBlob},
		{blobPath(manDesc.Digest), manBlob},
	} {
		if err := writeEntry(tw, e.name, bytes.NewReader(e.data), int64(len(e.data))); err != nil {
			return Image{}, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: blobPath(layer.Digest), Mode: 0o644, Size: layer.Size, ModTime: epoch,
		Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
		return Image{}, fmt.Errorf("checkpoint image: write layer: %w", err)
	}
	h := sha256.New()
	second := &countingWriter{w: io.MultiWriter(tw, h)}
	if err := emitLayer(write, cipher, second); err != nil {
		return Image{}, err
	}
	if second.n != layer.Size || digest.NewDigestFromBytes(digest.SHA256, h.Sum(nil)) != layer.Digest {
		return Image{}, fmt.Errorf("checkpoint image: the archive changed while it was read (%d bytes, then %d)", layer.Size, second.n)
	}
	if err := tw.Close(); err != nil {
		return Image{}, fmt.Errorf("checkpoint image: %w", err)
	}
	return img, nil
}

// describeLayer writes the layer once, through cipher when set, and
// returns its descriptor and its plain digest (the config's diff_id).
func describeLayer(write func(io.Writer) error, cipher *layerCipher, recipients []Recipient) (ocispec.Descriptor, digest.Digest, error) {
	plain := sha256.New()
	plainN := &countingWriter{w: plain}
	if cipher == nil {
		if err := write(plainN); err != nil {
			return ocispec.Descriptor{}, "", err
		}
		d := digest.NewDigestFromBytes(digest.SHA256, plain.Sum(nil))
		return ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: d, Size: plainN.n}, d, nil
	}
	enc := sha256.New()
	encN := &countingWriter{w: enc}
	var fin func() ([]byte, error)
	err := pipe(func(w io.Writer) error { return write(io.MultiWriter(plainN, w)) }, func(r io.Reader) error {
		er, f, err := cipher.encrypt(r)
		if err != nil {
			return fmt.Errorf("checkpoint image: encrypt layer: %w", err)
		}
		fin = f
		if _, err := io.Copy(encN, er); err != nil {
			return fmt.Errorf("checkpoint image: encrypt layer: %w", err)
		}
		return nil
	})
	if err != nil {
		return ocispec.Descriptor{}, "", err
	}
	diffID := digest.NewDigestFromBytes(digest.SHA256, plain.Sum(nil))
	ann, err := cipher.annotations(fin, diffID, recipients)
	if err != nil {
		return ocispec.Descriptor{}, "", fmt.Errorf("checkpoint image: encrypt layer: %w", err)
	}
	return ocispec.Descriptor{MediaType: MediaTypeLayerEncrypted, Digest: digest.NewDigestFromBytes(digest.SHA256, enc.Sum(nil)),
		Size: encN.n, Annotations: ann}, diffID, nil
}

// emitLayer writes the layer to w, through cipher when set.
func emitLayer(write func(io.Writer) error, cipher *layerCipher, w io.Writer) error {
	if cipher == nil {
		return write(w)
	}
	return pipe(write, func(r io.Reader) error {
		er, _, err := cipher.encrypt(r)
		if err != nil {
			return fmt.Errorf("checkpoint image: encrypt layer: %w", err)
		}
		if _, err := io.Copy(w, er); err != nil {
			return fmt.Errorf("checkpoint image: write layer: %w", err)
		}
		return nil
	})
}

// errStopped ends a producer whose consumer returned early.
var errStopped = errors.New("checkpoint image: the layer's reader stopped")

// pipe runs produce, writing into a pipe, beside consume, reading from
// it: the tar of the layer is made on one core while the other encrypts
// and hashes it. The first error of either is returned.
func pipe(produce func(io.Writer) error, consume func(io.Reader) error) error {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := produce(pw)
		pw.CloseWithError(err) // nil: the reader sees io.EOF
		done <- err
	}()
	cerr := consume(pr)
	pr.CloseWithError(errStopped)
	perr := <-done
	if perr != nil && !errors.Is(perr, errStopped) {
		return perr
	}
	return cerr
}

// layerBound is the most the layer of entries can take: each entry's
// data in whole blocks, its header with PAX records (a few blocks), the
// status.dump Write may add, and the end of the archive.
func layerBound(entries []archive.Entry) int64 {
	const block = 512
	n := int64(archive.MaxMetaSize + 8*block)
	for _, e := range entries {
		n += (e.Size+block-1)/block*block + 4*block
	}
	return n
}

func blobPath(d digest.Digest) string {
	return "blobs/" + d.Algorithm().String() + "/" + d.Encoded()
}

// blob encodes v and describes it as mediaType.
func blob(mediaType string, v any) ([]byte, ocispec.Descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, ocispec.Descriptor{}, fmt.Errorf("checkpoint image: encode %s: %w", mediaType, err)
	}
	return b, ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(b), Size: int64(len(b))}, nil
}

// epoch is every entry's time: the output depends on the archive only.
var epoch = time.Unix(0, 0).UTC()

// writeEntry writes a file (or, for a name ending in "/", a directory)
// with fixed owner, mode and time.
func writeEntry(tw *tar.Writer, name string, r io.Reader, size int64) error {
	h := &tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	if name[len(name)-1] == '/' {
		h.Typeflag, h.Mode, h.Size = tar.TypeDir, 0o755, 0
	}
	if err := tw.WriteHeader(h); err != nil {
		return fmt.Errorf("checkpoint image: write %s: %w", name, err)
	}
	if h.Typeflag == tar.TypeReg {
		if n, err := io.Copy(tw, r); err != nil || n != size {
			return fmt.Errorf("checkpoint image: write %s: %d of %d bytes: %w", name, n, size, err)
		}
	}
	return nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// writeLayer writes the archive's entries from its start as a tar to w,
// with config.dump replaced by config, and status as status.dump at the
// end when the archive has none: containerd's restore needs one.
func writeLayer(a io.ReadSeeker, w io.Writer, config, status []byte) error {
	if _, err := a.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("checkpoint image: %w", err)
	}
	tr := tar.NewReader(a)
	tw := tar.NewWriter(w)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("checkpoint image: read archive: %w", err)
		}
		var body io.Reader = tr
		if h.Name == archive.ConfigDump || h.Name == "./"+archive.ConfigDump {
			h.Size, body = int64(len(config)), bytes.NewReader(config)
		}
		if h.Name == archive.StatusDump || h.Name == "./"+archive.StatusDump {
			status = nil
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("checkpoint image: write layer: %s: %w", h.Name, err)
		}
		if _, err := io.Copy(tw, body); err != nil {
			return fmt.Errorf("checkpoint image: write layer: %s: %w", h.Name, err)
		}
	}
	if status != nil {
		h := &tar.Header{Name: archive.StatusDump, Mode: 0o600, Size: int64(len(status)), ModTime: epoch, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("checkpoint image: write layer: %s: %w", h.Name, err)
		}
		if _, err := tw.Write(status); err != nil {
			return fmt.Errorf("checkpoint image: write layer: %s: %w", h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("checkpoint image: write layer: %w", err)
	}
	return nil
}
