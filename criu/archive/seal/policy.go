package seal

import (
	"bytes"
	"encoding/hex"
	"fmt"

	"sigs.k8s.io/yaml"
)

// Policy is a trust policy: which signers' archives this node restores.
// Its file is YAML or JSON:
//
//	allowUnsigned: false        # the default
//	keys:
//	- keyID: sha256:3b1f...     # the key, by id (as in a signature file) ...
//	  node: node-a              # ... allowed to sign as node-a only
//	- publicKey: |              # or by public key (PEM or base64)
//	    -----BEGIN PUBLIC KEY-----
//	    ...
//
// A signature is trusted when one entry's key is the signer's and, if the
// entry names a node, the signature's node is that one. A node name alone
// trusts nothing: anyone can claim a name.
type Policy struct {
	// AllowUnsigned accepts archives without a signature file. Off by
	// default: an unsigned archive is refused.
	AllowUnsigned bool `json:"allowUnsigned,omitempty"`
	// Keys are the trusted signing keys.
	Keys []TrustedKey `json:"keys,omitempty"`
}

// TrustedKey is one trusted signing key.
type TrustedKey struct {
	// Node, when set, is the one node name the key may sign as.
	Node string `json:"node,omitempty"`
	// KeyID is the key's id (KeyID).
	KeyID string `json:"keyID,omitempty"`
	// PublicKey is the key, PEM "PUBLIC KEY" or the base64 of 32 bytes.
	PublicKey string `json:"publicKey,omitempty"`
}

// id returns the entry's key id, from KeyID or PublicKey (which agree,
// when both are set: ParsePolicy checks it).
func (k TrustedKey) id() string {
	if k.KeyID != "" {
		return k.KeyID
	}
	pub, err := ParsePublicKey(k.PublicKey)
	if err != nil {
		return ""
	}
	return KeyID(pub)
}

// ParsePolicy parses a trust policy file's content (YAML or JSON). Unknown
// fields, a key entry without a key and a malformed key or node name are
// refused, naming the entry.
func ParsePolicy(b []byte) (*Policy, error) {
	if len(b) > maxKeyFile {
		return nil, fmt.Errorf("%d bytes, more than %d", len(b), maxKeyFile)
	}
	var p Policy
	if len(bytes.TrimSpace(b)) > 0 {
		if err := yaml.UnmarshalStrict(b, &p); err != nil {
			return nil, fmt.Errorf("parse: %w", err)
		}
	}
	for i, k := range p.Keys {
		if k.KeyID == "" && k.PublicKey == "" {
			return nil, fmt.Errorf("keys[%d]: neither keyID nor publicKey (a node name alone trusts nothing)", i)
		}
		if k.KeyID != "" && !sha256Hex.MatchString(k.KeyID) {
			return nil, fmt.Errorf("keys[%d].keyID %q is not sha256:<64 hex>", i, k.KeyID)
		}
		if k.PublicKey != "" {
			pub, err := ParsePublicKey(k.PublicKey)
			if err != nil {
				return nil, fmt.Errorf("keys[%d].publicKey: %w", i, err)
			}
			if k.KeyID != "" && KeyID(pub) != k.KeyID {
				return nil, fmt.Errorf("keys[%d]: keyID %s is not the id of publicKey (%s)", i, k.KeyID, KeyID(pub))
			}
		}
		if k.Node != "" && !nodeName.MatchString(k.Node) {
			return nil, fmt.Errorf("keys[%d].node %q is not a DNS subdomain", i, k.Node)
		}
	}
	return &p, nil
}

// LoadPolicy reads and parses the trust policy file path.
func LoadPolicy(path string) (*Policy, error) {
	b, err := readSmall(path)
	if err != nil {
		return nil, fmt.Errorf("trust policy: %w", err)
	}
	p, err := ParsePolicy(b)
	if err != nil {
		return nil, fmt.Errorf("trust policy %s: %w", path, err)
	}
	return p, nil
}

// trusts reports whether the policy trusts s's signer, and if not, why.
func (p *Policy) trusts(s *Signature) (bool, string) {
	for _, k := range p.Keys {
		if k.id() != s.KeyID {
			continue
		}
		if k.Node != "" && k.Node != s.Node {
			return false, fmt.Sprintf("key %s is trusted for node %q only, not %q", s.KeyID, k.Node, s.Node)
		}
		return true, ""
	}
	return false, fmt.Sprintf("unknown key %s (node %q) is not in the trust policy", s.KeyID, s.Node)
}

// Verify checks the signature s of some bytes, whose SHA-256 is sum and
// whose length is size, against p: made by a key p trusts for s's node,
// valid, and of these bytes. name names the signed object in the
// refusal, which wraps ErrUntrusted. Open does the same for an archive
// file; Verify is for what carries its signature inside (a checkpoint
// image's index).
func (p *Policy) Verify(s *Signature, name string, sum [32]byte, size int64) error {
	if ok, why := p.trusts(s); !ok {
		return untrusted(name, "%s", why)
	}
	if !s.verify() {
		return untrusted(name, "bad signature: it does not verify with key %s (node %q)", s.KeyID, s.Node)
	}
	if size != s.Size {
		return untrusted(name, "digest mismatch: %s bytes, the signature says %s", sizeString(size), sizeString(s.Size))
	}
	if got := hex.EncodeToString(sum[:]); got != digestHex(s.Digest) {
		return untrusted(name, "digest mismatch: the sha256 is %s, the signature says %s", got, digestHex(s.Digest))
	}
	return nil
}
