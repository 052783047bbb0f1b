// Package sealtest makes the keys of a node for the tests of what seals
// checkpoints (criu/archive/seal) and what reads them: an age identity,
// an ed25519 signing key and a trust policy of that key, written as an
// operator writes them (age-keygen, openssl genpkey, YAML), and the JWE
// key pairs of checkpoint image encryption.
package sealtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"filippo.io/age"

	"github.com/nodeshim/nodeshim/criu/archive/seal"
)

// Keys are one node's keys and the files they are written to.
type Keys struct {
	// Recipient encrypts to the node; IdentityFile decrypts (age-keygen's
	// form).
	Recipient    string
	IdentityFile string
	// Public and SigningKeyFile (PEM PKCS #8) are the node's signing key.
	Public         ed25519.PublicKey
	SigningKeyFile string
	// PolicyFile is a trust policy that trusts Public for the node.
	PolicyFile string
}

// NodeKeys makes node's keys and writes them into dir (made if missing)
// as <node>.age, <node>.key and <node>-policy.yaml, mode 0600.
func NodeKeys(t testing.TB, dir, node string) Keys {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	k := Keys{Recipient: id.Recipient().String(), Public: pub,
		IdentityFile: filepath.Join(dir, node+".age"), SigningKeyFile: filepath.Join(dir, node+".key"),
		PolicyFile: filepath.Join(dir, node+"-policy.yaml")}
	for p, b := range map[string][]byte{
		k.IdentityFile:   []byte(id.String() + "\n"),
		k.SigningKeyFile: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		k.PolicyFile:     []byte("keys:\n- keyID: " + seal.KeyID(pub) + "\n  node: " + node + "\n"),
	} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

// JWEKey is a key pair for OCI image layer encryption (JWE): the public
// key encrypts a checkpoint image to its holder (--encryption-key
// jwe:PublicFile), the private key decrypts it (podman pull
// --decryption-key PrivateFile).
type JWEKey struct {
	PublicFile, PrivateFile string
}

// NewJWEKey makes an RSA 2048 (ec false) or a P-256 key pair and writes
// it into dir as <name>.pub.pem (PKIX) and <name>.pem (PKCS #8), 0600.
func NewJWEKey(t testing.TB, dir, name string, ec bool) JWEKey {
	t.Helper()
	var priv crypto.Signer
	var err error
	if ec {
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	} else {
		priv, err = rsa.GenerateKey(rand.Reader, 2048)
	}
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	k := JWEKey{PublicFile: filepath.Join(dir, name+".pub.pem"), PrivateFile: filepath.Join(dir, name+".pem")}
	for p, b := range map[string][]byte{
		k.PublicFile:  pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
		k.PrivateFile: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
	} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return k
}
