package seal

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// SignatureSuffix names an archive's signature file: the archive's path
// with this suffix.
const SignatureSuffix = ".sig"

// Format is the signature file's format version.
const Format = "nodeshim.io/checkpoint-signature/v1"

// Signature is the content of a signature file: what the node that wrote
// an archive asserts about the archive's bytes as stored (the ciphertext
// when it is encrypted).
type Signature struct {
	// Format is Format.
	Format string `json:"format"`
	// Node is the name of the node that wrote the archive.
	Node string `json:"node"`
	// KeyID is KeyID(PublicKey).
	KeyID string `json:"keyID"`
	// PublicKey is the standard base64 of the signer's ed25519 public key;
	// a trust policy decides whether it is trusted.
	PublicKey string `json:"publicKey"`
	// Digest is "sha256:" and the hex SHA-256 of the archive file.
	Digest string `json:"digest"`
	// Size is the archive file's size in bytes.
	Size int64 `json:"size"`
	// Encrypted says the archive is an age file.
	Encrypted bool `json:"encrypted"`
	// Created is when the archive was sealed, RFC 3339.
	Created string `json:"created"`
	// Value is the standard base64 ed25519 signature of Payload.
	Value string `json:"signature"`
}

// The grammars of a signature's fields. Node names are Kubernetes node
// names (DNS subdomains); each field is checked so that the signed
// payload, one field a line, cannot be made ambiguous.
var (
	nodeName  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
	sha256Hex = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

// Payload is the byte string the signature signs: the format and every
// other field, one a line, in a fixed order.
func (s *Signature) Payload() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\nnode %s\nkey %s\npublic-key %s\ndigest %s\nsize %d\nencrypted %t\ncreated %s\n",
		s.Format, s.Node, s.KeyID, s.PublicKey, s.Digest, s.Size, s.Encrypted, s.Created)
	return b.Bytes()
}

// check verifies that every field is within its grammar.
func (s *Signature) check() error {
	switch {
	case s.Format != Format:
		return fmt.Errorf("format %q, want %q", s.Format, Format)
	case !nodeName.MatchString(s.Node):
		return fmt.Errorf("node name %q is not a DNS subdomain", s.Node)
	case !sha256Hex.MatchString(s.KeyID):
		return fmt.Errorf("key id %q is not sha256:<64 hex>", s.KeyID)
	case !sha256Hex.MatchString(s.Digest):
		return fmt.Errorf("digest %q is not sha256:<64 hex>", s.Digest)
	case s.Size < 0:
		return fmt.Errorf("size %d is negative", s.Size)
	}
	pub, err := base64.StdEncoding.Strict().DecodeString(s.PublicKey)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("public key %q is not the base64 of %d bytes", s.PublicKey, ed25519.PublicKeySize)
	}
	if KeyID(pub) != s.KeyID {
		return fmt.Errorf("key id %s is not the public key's (%s)", s.KeyID, KeyID(pub))
	}
	if _, err := time.Parse(time.RFC3339, s.Created); err != nil || strings.ContainsAny(s.Created, "\n ") {
		return fmt.Errorf("created %q is not an RFC 3339 time", s.Created)
	}
	sig, err := base64.StdEncoding.Strict().DecodeString(s.Value)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("signature is not the base64 of %d bytes", ed25519.SignatureSize)
	}
	return nil
}

// publicKey returns the signer's public key; check has validated it.
func (s *Signature) publicKey() ed25519.PublicKey {
	b, _ := base64.StdEncoding.DecodeString(s.PublicKey)
	return ed25519.PublicKey(b)
}

// verify checks the signature value over Payload with the signer's key.
func (s *Signature) verify() bool {
	sig, err := base64.StdEncoding.DecodeString(s.Value)
	if err != nil {
		return false
	}
	return ed25519.Verify(s.publicKey(), s.Payload(), sig)
}

// NewSignature signs the archive bytes of digest (its SHA-256) and size
// as signer at the time now.
func NewSignature(signer Signer, digest [32]byte, size int64, encrypted bool, now time.Time) (*Signature, error) {
	pub, ok := signer.Key.Public().(ed25519.PublicKey)
	if !ok || len(signer.Key) != ed25519.PrivateKeySize {
		return nil, errors.New("signing key is not an ed25519 private key")
	}
	s := &Signature{
		Format:    Format,
		Node:      signer.Node,
		KeyID:     KeyID(pub),
		PublicKey: base64.StdEncoding.EncodeToString(pub),
		Digest:    "sha256:" + hex.EncodeToString(digest[:]),
		Size:      size,
		Encrypted: encrypted,
		Created:   now.UTC().Format(time.RFC3339),
	}
	s.Value = base64.StdEncoding.EncodeToString(ed25519.Sign(signer.Key, s.Payload()))
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("sign as node %q: %w", signer.Node, err)
	}
	return s, nil
}

// Marshal encodes s as the signature file's JSON.
func (s *Signature) Marshal() []byte {
	b, _ := json.MarshalIndent(s, "", "  ") // strings and numbers only: never fails
	return append(b, '\n')
}

// ParseSignature parses a signature file: one JSON object with exactly
// the fields of Signature, each within its grammar. It does not verify
// the signature (Open does, against a policy).
func ParseSignature(b []byte) (*Signature, error) {
	if len(b) > maxKeyFile {
		return nil, fmt.Errorf("%d bytes, more than %d", len(b), maxKeyFile)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	var s Signature
	if err := d.Decode(&s); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("parse: data after the JSON object")
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	return &s, nil
}

// digestHex returns the hex digest of a "sha256:<hex>" string.
func digestHex(d string) string { return strings.TrimPrefix(d, "sha256:") }

// sizeString formats n for messages.
func sizeString(n int64) string { return strconv.FormatInt(n, 10) }
