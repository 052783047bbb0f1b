package ociprofile

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
)

// DefaultTimeout bounds one Fetch when Client.Timeout is zero: four small
// requests. serve fetches while it checks a configuration too, so a
// registry that does not answer holds the configuration's check for this
// long per reference.
const DefaultTimeout = 30 * time.Second

// Client fetches signed profiles from registries.
type Client struct {
	// Keys are the trusted public keys: a profile is read only when a
	// cosign signature over its manifest verifies under one of them. With
	// none, Fetch refuses every reference (ErrNoKeys).
	Keys []*ecdsa.PublicKey
	// PlainHTTP lists the registries (host:port, as in the reference) that
	// are reached over plain HTTP; every other registry over HTTPS.
	PlainHTTP []string
	// HTTPClient carries the requests; http.DefaultClient's transport
	// when nil. Registries that ask for a token get an anonymous one.
	HTTPClient *http.Client
	// Arch is the node's architecture in GOARCH terms, which picks the
	// platform's layer; runtime.GOARCH when empty.
	Arch string
	// Timeout bounds one Fetch; DefaultTimeout when zero.
	Timeout time.Duration
}

// Profile is a profile read from a registry.
type Profile struct {
	// Ref is the reference it was fetched by.
	Ref Reference
	// Manifest is the digest of its manifest, the one the signature names.
	Manifest digest.Digest
	// Layer is the profile layer's descriptor.
	Layer ocispec.Descriptor
	// JSON is the profile as OCI runtime-spec seccomp JSON
	// (ConvertProfile).
	JSON []byte
}

// Fetch reads the profile ref names: the manifest (by its tag or digest),
// the cosign signature of that manifest's digest, which must verify under
// one of c.Keys and name that digest, then the profile layer the manifest
// names, checked against its digest. Every error is an *Error naming ref.
func (c *Client) Fetch(ctx context.Context, ref string) (Profile, error) {
	p, err := c.fetch(ctx, ref)
	if err != nil {
		return Profile{}, &Error{Ref: strings.TrimSpace(ref), Err: err}
	}
	return p, nil
}

func (c *Client) fetch(ctx context.Context, s string) (Profile, error) {
	ref, err := ParseReference(s)
	if err != nil {
		return Profile{}, err
	}
	if len(c.Keys) == 0 {
		return Profile{}, ErrNoKeys
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	repo, err := c.repository(ref)
	if err != nil {
		return Profile{}, err
	}

	// 1. The manifest's bytes and their digest: what is verified is what
	// is then read.
	id := ref.Tag
	if ref.Digest != "" {
		id = ref.Digest.String()
	}
	manifest, md, err := fetchManifest(ctx, repo, id, "manifest")
	if err != nil {
		return Profile{}, err
	}
	if ref.Digest != "" && md != ref.Digest {
		return Profile{}, fmt.Errorf("manifest: %w: it hashes to %s", ErrDigest, md)
	}

	// 2. The signature, before anything of the manifest is parsed.
	if err := c.verify(ctx, repo, md); err != nil {
		return Profile{}, err
	}

	// 3. The profile layer of the signed manifest.
	arch := c.Arch
	if arch == "" {
		arch = runtime.GOARCH
	}
	layer, err := profileLayer(manifest, arch)
	if err != nil {
		return Profile{}, err
	}
	data, err := fetchBlob(ctx, repo, layer, "layer "+layer.Annotations[AnnotationTitle])
	if err != nil {
		return Profile{}, err
	}
	js, err := ConvertProfile(data)
	if err != nil {
		return Profile{}, fmt.Errorf("layer %s: %w", layer.Annotations[AnnotationTitle], err)
	}
	return Profile{Ref: ref, Manifest: md, Layer: layer, JSON: js}, nil
}

// verify finds a simple-signing layer of the signature manifest of md that
// verifies under a trusted key and names md.
func (c *Client) verify(ctx context.Context, repo *remote.Repository, md digest.Digest) error {
	tag := SignatureTag(md)
	data, _, err := fetchManifest(ctx, repo, tag, "signature "+tag)
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%w: no tag %s in %s", ErrUnsigned, tag, repo.Reference.Repository)
	}
	if err != nil {
		return err
	}
	layers, err := parseSignatureManifest(data)
	if err != nil {
		return err
	}
	var errs []error
	for _, l := range layers {
		payload, err := fetchBlob(ctx, repo, l.payload, "signature payload")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		err = verifyPayload(c.Keys, payload, l.signature, md)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return fmt.Errorf("none of %d signatures is accepted: %w", len(layers), errors.Join(errs...))
}

func (c *Client) repository(ref Reference) (*remote.Repository, error) {
	repo, err := remote.NewRepository(ref.Registry + "/" + ref.Repository)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrReference, err)
	}
	repo.PlainHTTP = slices.Contains(c.PlainHTTP, ref.Registry)
	hc := c.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	// Anonymous: a public registry hands out a pull token without
	// credentials; nodeshim has none to give.
	repo.Client = &auth.Client{Client: hc, Cache: auth.NewCache()}
	repo.MaxMetadataBytes = MaxManifestBytes
	return repo, nil
}

// fetchManifest reads a manifest by tag or digest, at most
// MaxManifestBytes, and returns it with the digest of its bytes. A
// registry that names another digest for them is refused.
func fetchManifest(ctx context.Context, repo *remote.Repository, id, what string) ([]byte, digest.Digest, error) {
	desc, rc, err := repo.Manifests().FetchReference(ctx, id)
	if err != nil {
		return nil, "", classify(what, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, MaxManifestBytes+1))
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w: %w", what, ErrUnavailable, err)
	}
	if len(data) > MaxManifestBytes {
		return nil, "", fmt.Errorf("%s: %w: more than %d bytes", what, ErrTooLarge, MaxManifestBytes)
	}
	d := digest.SHA256.FromBytes(data)
	if desc.Digest != "" && desc.Digest != d {
		return nil, "", fmt.Errorf("%s: %w: the registry names %s, the bytes hash to %s", what, ErrDigest, desc.Digest, d)
	}
	return data, d, nil
}

// fetchBlob reads the blob desc names, no more than desc.Size bytes, and
// checks it against desc.Digest.
func fetchBlob(ctx context.Context, repo *remote.Repository, desc ocispec.Descriptor, what string) ([]byte, error) {
	rc, err := repo.Blobs().Fetch(ctx, desc)
	if err != nil {
		return nil, classify(what, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, desc.Size+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", what, ErrUnavailable, err)
	}
	if int64(len(data)) != desc.Size {
		return nil, fmt.Errorf("%s: %w: %d bytes or more, the manifest says %d", what, ErrDigest, len(data), desc.Size)
	}
	if got := desc.Digest.Algorithm().FromBytes(data); got != desc.Digest {
		return nil, fmt.Errorf("%s: %w: it hashes to %s, the manifest says %s", what, ErrDigest, got, desc.Digest)
	}
	return data, nil
}

// classify maps a registry error to this package's errors: missing is
// ErrNotFound, a size the client refused ErrTooLarge, content of another
// size or digest ErrDigest, anything else (no answer, an error status)
// ErrUnavailable.
func classify(what string, err error) error {
	switch {
	case errors.Is(err, errdef.ErrNotFound):
		return fmt.Errorf("%s: %w: %w", what, ErrNotFound, err)
	case errors.Is(err, errdef.ErrSizeExceedsLimit):
		return fmt.Errorf("%s: %w: %w", what, ErrTooLarge, err)
	case errors.Is(err, errdef.ErrInvalidDigest), strings.Contains(err.Error(), "mismatch Content-Length"):
		// The registry serves another size or digest than the manifest
		// names (oras-go's unwrapped error, repository.go).
		return fmt.Errorf("%s: %w: %w", what, ErrDigest, err)
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("%s: %w: %w (list the registry in seccompRegistry.plainHTTP if it is a loopback one)", what, ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w: %w", what, ErrUnavailable, err)
}

// New is a client that trusts the PEM public keys publicKeys (each
// ParsePublicKey's form) and reaches the registries of plainHTTP over
// plain HTTP, as nodeshim's configuration gives them
// (seccompRegistry.publicKeys, .plainHTTP). With no key it returns nil:
// nothing can be verified, so oci:// profiles are refused.
func New(publicKeys, plainHTTP []string) (*Client, error) {
	if len(publicKeys) == 0 {
		return nil, nil
	}
	c := &Client{PlainHTTP: slices.Clone(plainHTTP)}
	for i, k := range publicKeys {
		pub, err := ParsePublicKey([]byte(k))
		if err != nil {
			return nil, fmt.Errorf("public key %d: %w", i, err)
		}
		c.Keys = append(c.Keys, pub)
	}
	return c, nil
}
