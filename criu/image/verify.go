package image

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/nodeshim/nodeshim/criu/archive/seal"
)

// maxSmallBlob bounds the index, a manifest or a config as read into
// memory; a layer is hashed as it streams.
const maxSmallBlob = 1 << 20

// Verify reads the OCI image layout archive r (as WriteWith writes it,
// named name in messages) and checks it against the trust policy p
// before anything loads it: one manifest in the index, whose descriptor
// carries a signature (SignatureAnnotation) by a key p trusts, over the
// manifest's bytes; and every blob the manifest names present with the
// digest and size it says. Nothing is decrypted: the signature and the
// digests cover the ciphertext of an encrypted layer. It returns the
// verified signature, or nil for an unsigned image p allows. A refusal
// wraps seal.ErrUntrusted and says why.
func Verify(r io.Reader, name string, p *seal.Policy) (*seal.Signature, error) {
	type blobInfo struct {
		size int64
		data []byte // the bytes of a small blob
	}
	blobs := map[digest.Digest]blobInfo{}
	var index []byte
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		switch {
		case h.Name == ocispec.ImageIndexFile:
			if index, err = readSmallEntry(tr, h); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", name, h.Name, err)
			}
		case strings.HasPrefix(h.Name, "blobs/sha256/"):
			d := digest.NewDigestFromEncoded(digest.SHA256, strings.TrimPrefix(h.Name, "blobs/sha256/"))
			if d.Validate() != nil {
				return nil, refuse(name, "blob %s is not named by a sha256 digest", h.Name)
			}
			sum := sha256.New()
			keep := &prefixBuffer{max: maxSmallBlob}
			n, err := io.Copy(io.MultiWriter(sum, keep), tr)
			if err != nil {
				return nil, fmt.Errorf("read %s: %s: %w", name, h.Name, err)
			}
			if got := digest.NewDigestFromBytes(digest.SHA256, sum.Sum(nil)); got != d {
				return nil, refuse(name, "blob %s has digest %s", d, got)
			}
			b := blobInfo{size: n}
			if !keep.over {
				b.data = keep.b
			}
			blobs[d] = b
		}
	}
	if index == nil {
		return nil, refuse(name, "no %s: not an OCI image layout archive", ocispec.ImageIndexFile)
	}
	var idx ocispec.Index
	if err := json.Unmarshal(index, &idx); err != nil {
		return nil, refuse(name, "%s: %v", ocispec.ImageIndexFile, err)
	}
	if len(idx.Manifests) != 1 {
		return nil, refuse(name, "%d manifests in the index, not one", len(idx.Manifests))
	}
	md := idx.Manifests[0]
	manBlob, ok := blobs[md.Digest]
	if !ok || manBlob.data == nil || manBlob.size != md.Size {
		return nil, refuse(name, "the manifest %s is missing or not of %d bytes", md.Digest, md.Size)
	}
	var sig *seal.Signature
	if enc, signed := md.Annotations[SignatureAnnotation]; signed {
		raw, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			return nil, refuse(name, "signature annotation: %v", err)
		}
		if sig, err = seal.ParseSignature(raw); err != nil {
			return nil, refuse(name, "signature annotation: %v", err)
		}
		if err := p.Verify(sig, name+": manifest "+md.Digest.String(), sha256.Sum256(manBlob.data), manBlob.size); err != nil {
			return nil, err
		}
	} else if !p.AllowUnsigned {
		return nil, refuse(name, "unsigned: the index carries no %s, and the trust policy does not allow unsigned images", SignatureAnnotation)
	}
	var man ocispec.Manifest
	if err := json.Unmarshal(manBlob.data, &man); err != nil {
		return nil, refuse(name, "manifest: %v", err)
	}
	for _, d := range append([]ocispec.Descriptor{man.Config}, man.Layers...) {
		if b, ok := blobs[d.Digest]; !ok || b.size != d.Size {
			return nil, refuse(name, "blob %s (%s) is missing or not of %d bytes", d.Digest, d.MediaType, d.Size)
		}
	}
	return sig, nil
}

func refuse(name, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", name, fmt.Sprintf(format, args...), seal.ErrUntrusted)
}

// readSmallEntry reads the tar member h of at most maxSmallBlob bytes.
func readSmallEntry(r io.Reader, h *tar.Header) ([]byte, error) {
	if h.Size > maxSmallBlob {
		return nil, fmt.Errorf("%d bytes, more than %d", h.Size, maxSmallBlob)
	}
	return io.ReadAll(r)
}

// prefixBuffer keeps what is written to it up to max bytes, and notes
// whether more came.
type prefixBuffer struct {
	b    []byte
	max  int
	over bool
}

func (p *prefixBuffer) Write(b []byte) (int, error) {
	if !p.over {
		if len(p.b)+len(b) > p.max {
			p.over, p.b = true, nil
		} else {
			p.b = append(p.b, b...)
		}
	}
	return len(b), nil
}
