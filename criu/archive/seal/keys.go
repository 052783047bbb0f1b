package seal

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"filippo.io/age"
)

// maxKeyFile bounds what is read of a key, recipients, policy or
// signature file: all of them are a few hundred bytes.
const maxKeyFile = 1 << 20

// readSmall reads the regular file path, of at most maxKeyFile bytes.
func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is a %s, not a regular file", path, fi.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxKeyFile {
		return nil, fmt.Errorf("%s has more than %d bytes", path, maxKeyFile)
	}
	return b, nil
}

// ParseRecipients returns the age recipients that specs name: each spec
// is either a recipient string (age1...) or the path of a recipients file
// (one recipient a line, # comments), as the age command line tool takes
// with -r and -R.
func ParseRecipients(specs []string) ([]age.Recipient, error) {
	var out []age.Recipient
	for _, s := range specs {
		s = strings.TrimSpace(s)
		if strings.HasPrefix(s, "age1") {
			rs, err := age.ParseRecipients(strings.NewReader(s))
			if err != nil {
				return nil, fmt.Errorf("recipient %q: %w", s, err)
			}
			out = append(out, rs...)
			continue
		}
		b, err := readSmall(s)
		if err != nil {
			return nil, fmt.Errorf("recipients file: %w", err)
		}
		rs, err := age.ParseRecipients(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("recipients file %s: %w", s, err)
		}
		out = append(out, rs...)
	}
	return out, nil
}

// LoadIdentities reads age identity files (AGE-SECRET-KEY-1... lines, as
// age-keygen writes them). A path that is a directory contributes every
// regular file in it whose name does not start with a dot, in name order:
// a directory of old and new keys is how keys rotate, since every
// identity is tried and archives sealed to a retired key stay readable as
// long as its file stays.
func LoadIdentities(paths []string) ([]age.Identity, error) {
	var out []age.Identity
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("identity: %w", err)
		}
		files := []string{p}
		if fi.IsDir() {
			ents, err := os.ReadDir(p)
			if err != nil {
				return nil, fmt.Errorf("identity directory: %w", err)
			}
			files = files[:0]
			for _, e := range ents {
				// Kubernetes mounts a Secret's keys as symlinks into a
				// hidden ..data directory: follow them, skip the dot names.
				if strings.HasPrefix(e.Name(), ".") {
					continue
				}
				full := filepath.Join(p, e.Name())
				if st, err := os.Stat(full); err == nil && st.Mode().IsRegular() {
					files = append(files, full)
				}
			}
			sort.Strings(files)
			if len(files) == 0 {
				return nil, fmt.Errorf("identity directory %s holds no key files", p)
			}
		}
		for _, f := range files {
			b, err := readSmall(f)
			if err != nil {
				return nil, fmt.Errorf("identity file: %w", err)
			}
			ids, err := age.ParseIdentities(bytes.NewReader(b))
			if err != nil {
				return nil, fmt.Errorf("identity file %s: %w", f, err)
			}
			out = append(out, ids...)
		}
	}
	return out, nil
}

// Signer is a node's signing key and the name it signs as.
type Signer struct {
	// Node is the node's name, recorded in every signature.
	Node string
	// Key is the node's ed25519 private key.
	Key ed25519.PrivateKey
}

// KeyID returns the id of the ed25519 public key pub: "sha256:" and the
// hex SHA-256 of its 32 bytes.
func KeyID(pub ed25519.PublicKey) string {
	s := sha256.Sum256(pub)
	return "sha256:" + hex.EncodeToString(s[:])
}

// LoadSigningKey reads an ed25519 private key from path: PEM "PRIVATE KEY"
// (PKCS #8, as `openssl genpkey -algorithm ed25519` writes it).
func LoadSigningKey(path string) (ed25519.PrivateKey, error) {
	b, err := readSmall(path)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	k, err := ParseSigningKey(b)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	return k, nil
}

// ParseSigningKey parses a PEM PKCS #8 ed25519 private key.
func ParseSigningKey(b []byte) (ed25519.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, errors.New(`no PEM "PRIVATE KEY" block`)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, err
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T, not an ed25519 key", k)
	}
	return ek, nil
}

// ParsePublicKey parses an ed25519 public key written as PEM "PUBLIC KEY"
// (PKIX, `openssl pkey -pubout`) or as the standard base64 of its 32 bytes.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	s = strings.TrimSpace(s)
	if blk, _ := pem.Decode([]byte(s)); blk != nil {
		if blk.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("PEM block %q, not PUBLIC KEY", blk.Type)
		}
		k, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, err
		}
		ek, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("a %T, not an ed25519 key", k)
		}
		return ek, nil
	}
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("neither PEM nor base64: %w", err)
	}
	if len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%d bytes, not the %d of an ed25519 key", len(b), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}
