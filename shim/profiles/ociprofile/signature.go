package ociprofile

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// ParsePublicKey reads one PEM "PUBLIC KEY" block (PKIX), the form of
// `cosign generate-key-pair`'s cosign.pub: an ECDSA key on P-256, which
// cosign signs with over SHA-256. Other keys are refused. The error does
// not repeat the key.
func ParsePublicKey(data []byte) (*ecdsa.PublicKey, error) {
	block, rest := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%w: no PEM block", ErrKey)
	}
	if strings.TrimSpace(string(rest)) != "" {
		return nil, fmt.Errorf("%w: more than one PEM block (give each key on its own)", ErrKey)
	}
	if block.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("%w: PEM block %q, want PUBLIC KEY", ErrKey, block.Type)
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKey, err)
	}
	ec, ok := k.(*ecdsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%w: a %T, want ECDSA P-256 (cosign generate-key-pair)", ErrKey, k)
	}
	if ec.Curve != elliptic.P256() {
		return nil, fmt.Errorf("%w: ECDSA on %s, want P-256", ErrKey, ec.Curve.Params().Name)
	}
	return ec, nil
}

// SignatureTag is the tag under which cosign stores the signatures of the
// manifest d in its repository: "sha256-<hex>.sig".
func SignatureTag(d digest.Digest) string {
	return d.Algorithm().String() + "-" + d.Encoded() + ".sig"
}

// Payload is cosign's simple-signing payload (the blob of a
// simple-signing layer), as far as nodeshim reads it.
type Payload struct {
	// Critical is what the signature vouches for.
	Critical struct {
		// Identity names the repository the signer signed in.
		Identity struct {
			DockerReference string `json:"docker-reference"`
		} `json:"identity"`
		// Image names the manifest's digest.
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		// Type is SignatureType.
		Type string `json:"type"`
	} `json:"critical"`
}

// ParsePayload decodes a cosign payload and checks its type.
func ParsePayload(data []byte) (Payload, error) {
	var p Payload
	if len(data) > MaxPayloadBytes {
		return p, fmt.Errorf("signature payload: %w: %d bytes, more than %d", ErrTooLarge, len(data), MaxPayloadBytes)
	}
	if err := json.Unmarshal(data, &p); err != nil {
		return p, fmt.Errorf("signature payload: %w: %w", ErrMalformed, err)
	}
	if p.Critical.Type != SignatureType {
		return p, fmt.Errorf("signature payload: %w: critical.type %q, want %q", ErrMalformed, p.Critical.Type, SignatureType)
	}
	return p, nil
}

// sigLayer is one simple-signing layer of a signature manifest: the
// payload's descriptor and the signature over it.
type sigLayer struct {
	payload   ocispec.Descriptor
	signature []byte
}

// parseSignatureManifest decodes a cosign signature manifest and returns
// its simple-signing layers (at most MaxSignatures, each payload at most
// MaxPayloadBytes). A layer without a decodable signature is skipped with
// its reason kept for the error when none is left.
func parseSignatureManifest(data []byte) ([]sigLayer, error) {
	m, err := parseManifest(data, "signature manifest")
	if err != nil {
		return nil, err
	}
	var out []sigLayer
	var skipped []string
	for i, l := range m.Layers {
		if l.MediaType != MediaTypeSimpleSigning {
			continue
		}
		if len(out) == MaxSignatures {
			break
		}
		b64, ok := l.Annotations[AnnotationSignature]
		if !ok {
			skipped = append(skipped, fmt.Sprintf("layers[%d] has no %s annotation", i, AnnotationSignature))
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("layers[%d]'s signature is not base64: %v", i, err))
			continue
		}
		if l.Size < 0 || l.Size > MaxPayloadBytes {
			skipped = append(skipped, fmt.Sprintf("layers[%d]'s payload is %d bytes, more than %d", i, l.Size, MaxPayloadBytes))
			continue
		}
		if err := l.Digest.Validate(); err != nil {
			skipped = append(skipped, fmt.Sprintf("layers[%d]'s digest: %v", i, err))
			continue
		}
		out = append(out, sigLayer{payload: l, signature: sig})
	}
	if len(out) == 0 {
		why := "no " + MediaTypeSimpleSigning + " layer"
		if len(skipped) > 0 {
			why = strings.Join(skipped, "; ")
		}
		return nil, fmt.Errorf("%w: signature manifest: %s", ErrUnsigned, why)
	}
	return out, nil
}

// verifyPayload checks sig over payload under each key (ECDSA, ASN.1, over
// SHA-256 of the payload, as cosign signs) and, when one verifies, that the
// payload names want. It returns ErrBadSignature when no key verifies and
// ErrOtherDigest when the signature is good for another manifest.
func verifyPayload(keys []*ecdsa.PublicKey, payload, sig []byte, want digest.Digest) error {
	h := sha256.Sum256(payload)
	ok := false
	for _, k := range keys {
		if ecdsa.VerifyASN1(k, h[:], sig) {
			ok = true
			break
		}
	}
	if !ok {
		return fmt.Errorf("%w (keys tried: %d)", ErrBadSignature, len(keys))
	}
	// Only a payload that verified is decoded.
	p, err := ParsePayload(payload)
	if err != nil {
		return err
	}
	if got := p.Critical.Image.DockerManifestDigest; got != want.String() {
		return fmt.Errorf("%w: it names %q, the manifest is %s", ErrOtherDigest, got, want)
	}
	return nil
}
