package ociprofile

import (
	"fmt"
	"strings"

	"github.com/opencontainers/go-digest"
	"oras.land/oras-go/v2/registry"
)

// Reference is a parsed oci:// reference.
type Reference struct {
	// Registry is host[:port].
	Registry string
	// Repository is the repository's path in the registry.
	Repository string
	// Tag is the tag, when the reference names one.
	Tag string
	// Digest is the manifest's digest, when the reference pins one; it
	// wins over Tag, and the fetched manifest must hash to it.
	Digest digest.Digest
}

// String is the reference in oci:// form.
func (r Reference) String() string {
	s := Scheme + r.Registry + "/" + r.Repository
	if r.Tag != "" {
		s += ":" + r.Tag
	}
	if r.Digest != "" {
		s += "@" + r.Digest.String()
	}
	return s
}

// IsReference reports whether s is meant as an oci:// reference (it may
// still not parse).
func IsReference(s string) bool { return strings.HasPrefix(strings.TrimSpace(s), Scheme) }

// ParseReference parses "oci://registry/repository:tag",
// "oci://registry/repository@sha256:<hex>" or both together. A reference
// without a tag or digest is refused rather than read as "latest": a
// profile that changes under its name would change what nodes enforce.
// Only sha256 digests are accepted (what registries and cosign use).
func ParseReference(s string) (Reference, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), Scheme)
	if !ok {
		return Reference{}, fmt.Errorf("%q: %w: it must start with %s", s, ErrReference, Scheme)
	}
	r, err := registry.ParseReference(rest)
	if err != nil {
		return Reference{}, fmt.Errorf("%q: %w: %w", s, ErrReference, err)
	}
	if r.Reference == "" {
		return Reference{}, fmt.Errorf("%q: %w: it names no tag or digest", s, ErrReference)
	}
	out := Reference{Registry: r.Registry, Repository: r.Repository}
	if d, err := r.Digest(); err == nil {
		if d.Algorithm() != digest.SHA256 {
			return Reference{}, fmt.Errorf("%q: %w: digest algorithm %s, only sha256 is accepted", s, ErrReference, d.Algorithm())
		}
		// "repo:tag@digest" is read as the digest alone.
		out.Digest = d
	} else {
		out.Tag = r.Reference
	}
	return out, nil
}
