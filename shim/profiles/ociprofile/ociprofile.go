// Package ociprofile reads a seccomp profile out of an OCI registry, in the
// artifact format that security-profiles-operator's `spoc push` writes,
// after it has verified a cosign signature over the artifact's manifest
// against a configured public key.
//
// The order is the point: the manifest is fetched once and hashed; the
// cosign signature stored beside it (tag sha256-<hex>.sig, simple-signing
// layers) must verify under a trusted key, and its payload must name that
// exact digest, before the manifest is parsed for its profile layer. The
// layer is then fetched by the digest the signed manifest gives, bounded by
// the size it gives, so a layer changed in the registry fails its digest.
// Only then is the profile (a SeccompProfile object in YAML) read and turned
// into OCI runtime-spec seccomp JSON for the installer (shim/profiles).
package ociprofile

import (
	"fmt"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// Scheme starts a reference to a profile in a registry, as
// security-profiles-operator writes it in baseProfileName:
// "oci://registry/repository:tag" or "...@sha256:<hex>".
const Scheme = "oci://"

// Media types and annotations of the artifacts read here.
const (
	// MediaTypeManifest is the OCI image manifest both `spoc push` and
	// `cosign sign` write.
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	// MediaTypeDockerManifest is the Docker v2 manifest older cosign
	// releases wrote for signatures.
	MediaTypeDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
	// MediaTypeIndex is an OCI image index: a list of manifests, not a
	// profile.
	MediaTypeIndex = "application/vnd.oci.image.index.v1+json"
	// MediaTypeSimpleSigning is the layer of a cosign signature manifest
	// whose blob is the signed payload.
	MediaTypeSimpleSigning = "application/vnd.dev.cosign.simplesigning.v1+json"
	// AnnotationSignature holds a simple-signing layer's signature, base64.
	AnnotationSignature = "dev.cosignproject.cosign/signature"
	// AnnotationTitle names a layer's file (oras' file store sets it).
	AnnotationTitle = "org.opencontainers.image.title"
	// SignatureType is the critical.type of a cosign payload.
	SignatureType = "cosign container image signature"
	// DefaultProfileFile is the layer `spoc push` writes for a profile
	// without a platform; a platform's is profile-<os>-<arch>.yaml.
	DefaultProfileFile = "profile.yaml"
)

// Bounds on what a registry may hand over. A registry is outside input:
// nothing it sends is read past these.
const (
	// MaxManifestBytes bounds a manifest, the profile's or a signature's
	// (a spoc manifest is under 1 KiB).
	MaxManifestBytes = 64 << 10
	// MaxPayloadBytes bounds a cosign payload (about 250 bytes without
	// annotations).
	MaxPayloadBytes = 64 << 10
	// MaxSignatures bounds the simple-signing layers tried.
	MaxSignatures = 32
	// MaxLayers bounds the layers of a profile manifest.
	MaxLayers = 64
	// MaxProfileBytes bounds the profile layer: kernel/seccomp's own
	// MaxProfileBytes (a test holds them equal; the package is not
	// imported, so that shim/config can check keys without libseccomp).
	MaxProfileBytes = 1 << 20
)

// Errors that callers and tests branch on; each carries an errdefs class.
var (
	// ErrReference: the oci:// reference does not parse.
	ErrReference = errdefs.New(errdefs.ErrInvalidArgument, "invalid oci:// reference")
	// ErrNoKeys: no trusted public key is configured, so nothing can be
	// verified and nothing is fetched.
	ErrNoKeys = errdefs.New(errdefs.ErrNotSupported, "no trusted public key is configured for oci:// profiles (seccompRegistry.publicKeys)")
	// ErrKey: a configured public key does not parse or is not ECDSA P-256.
	ErrKey = errdefs.New(errdefs.ErrInvalidArgument, "invalid public key")
	// ErrUnsigned: the registry holds no cosign signature for the
	// manifest's digest.
	ErrUnsigned = errdefs.New(errdefs.ErrInvalidArgument, "not signed: no cosign signature for the manifest's digest")
	// ErrBadSignature: no signature verifies under a trusted key.
	ErrBadSignature = errdefs.New(errdefs.ErrInvalidArgument, "no signature verifies under a trusted public key")
	// ErrOtherDigest: a signature verifies, but its payload names another
	// manifest (a signature moved from one artifact to another).
	ErrOtherDigest = errdefs.New(errdefs.ErrInvalidArgument, "the signature is for another manifest digest")
	// ErrDigest: content does not hash to the digest it was fetched by
	// (changed in the registry or on the way).
	ErrDigest = errdefs.New(errdefs.ErrInvalidArgument, "content does not match its digest")
	// ErrTooLarge: a manifest, payload or layer is larger than its bound.
	ErrTooLarge = errdefs.New(errdefs.ErrInvalidArgument, "larger than nodeshim accepts")
	// ErrNotProfile: the artifact is not a seccomp profile pushed by
	// spoc (no profile layer, another kind of object, an index).
	ErrNotProfile = errdefs.New(errdefs.ErrInvalidArgument, "not a seccomp profile artifact")
	// ErrMalformed: a manifest or payload does not decode.
	ErrMalformed = errdefs.New(errdefs.ErrInvalidArgument, "malformed")
	// ErrNotFound: the registry has no such repository or tag.
	ErrNotFound = errdefs.New(errdefs.ErrNotFound, "not found in the registry")
	// ErrUnavailable: the registry could not be reached or answered with
	// an error; a later attempt may succeed.
	ErrUnavailable = errdefs.New(errdefs.ErrUnavailable, "registry unavailable")
)

// Error is a profile that could not be read from a registry: Ref names it
// as configured, Err says why (one of the errors above, wrapping the
// cause).
type Error struct {
	// Ref is the oci:// reference.
	Ref string
	// Err is the cause.
	Err error
}

// Error names the reference and the cause on one line.
func (e *Error) Error() string { return fmt.Sprintf("%s: %v", e.Ref, e.Err) }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }
