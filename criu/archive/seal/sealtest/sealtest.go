// Package sealtest makes the keys of a node for the tests of what seals
// checkpoints (criu/archive/seal) and what reads them: an age identity,
// an ed25519 signing key and a trust policy of that key, written as an
// operator writes them (age-keygen, openssl genpkey, YAML).
package sealtest

import (
	"crypto/ed25519"
	"crypto/rand"
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
