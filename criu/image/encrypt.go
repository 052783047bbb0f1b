package image

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdsa"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"

	jose "github.com/go-jose/go-jose/v4"
	digest "github.com/opencontainers/go-digest"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// The annotations of an encrypted layer (OCI image layer encryption, as
// containers/ocicrypt writes and reads them: docs/spec.md there).
const (
	// AnnotationKeysJWE holds the layer's key options wrapped to each
	// recipient: base64 of a JWE in its JSON serialization.
	AnnotationKeysJWE = "org.opencontainers.image.enc.keys.jwe"
	// AnnotationPubOpts holds the public options of the layer cipher
	// (the cipher and the HMAC of the ciphertext): base64 of JSON.
	AnnotationPubOpts = "org.opencontainers.image.enc.pubopts"
)

// MediaTypeLayerEncrypted is the media type of an encrypted uncompressed
// layer (ocicrypt's spec.MediaTypeLayerEnc), which containers/image
// (podman, CRI-O, skopeo) and containerd's imgcrypt decrypt.
const MediaTypeLayerEncrypted = "application/vnd.oci.image.layer.v1.tar+encrypted"

// cipherAESCTR names ocicrypt's layer cipher in the public options:
// AES-256 in counter mode, then HMAC-SHA256 of the ciphertext under the
// same key (ocicrypt's blockcipher.AES256CTR).
const cipherAESCTR = "AES_256_CTR_HMAC_SHA256"

// JWEScheme prefixes a recipient: the spelling of podman's, skopeo's and
// ctr's --encryption-key (jwe:/path/to/public.pem).
const JWEScheme = "jwe:"

// maxKeyFile bounds what is read of a recipient's public key file.
const maxKeyFile = 1 << 20

// ErrRecipient is returned, wrapped, for a recipient that is not a JWE
// public key.
var ErrRecipient = errdefs.New(errdefs.ErrInvalidArgument, "not a JWE recipient")

// Recipient is a public key a checkpoint image's layer is encrypted to:
// whoever holds its private key decrypts the image (podman pull
// --decryption-key KEY, ctr's imgcrypt).
type Recipient struct {
	// Spec is what named the recipient (jwe:PATH), for messages.
	Spec string
	// key is the public key (*rsa.PublicKey, *ecdsa.PublicKey or a public
	// *jose.JSONWebKey), alg the JWE key algorithm that wraps to it.
	key any
	alg jose.KeyAlgorithm
}

// ParseRecipient reads the recipient spec names, in the grammar of
// ocicrypt's --encryption-key restricted to JWE: "jwe:" and the absolute
// path of an RSA or EC public key (PEM or JWK). A private key, a
// certificate or another scheme (pgp, pkcs7, pkcs11, provider) is refused
// naming the spec: the other schemes need their own tools, and a private
// key in a recipient list is a key about to be shared by mistake.
func ParseRecipient(spec string) (Recipient, error) {
	path, ok := strings.CutPrefix(spec, JWEScheme)
	if !ok {
		scheme, _, _ := strings.Cut(spec, ":")
		return Recipient{}, fmt.Errorf("recipient %q: scheme %q: only %s/path/to/public.pem is supported: %w", spec, scheme, JWEScheme, ErrRecipient)
	}
	if !filepath.IsAbs(path) {
		return Recipient{}, fmt.Errorf("recipient %q: %q is not an absolute path: %w", spec, path, ErrRecipient)
	}
	b, err := readKeyFile(path)
	if err != nil {
		return Recipient{}, fmt.Errorf("recipient %q: %w", spec, err)
	}
	key, alg, err := parsePublicKey(b)
	if err != nil {
		return Recipient{}, fmt.Errorf("recipient %q: %w", spec, err)
	}
	return Recipient{Spec: spec, key: key, alg: alg}, nil
}

// jwkAlgorithms are the JWE key algorithms a JWK may name, as ocicrypt
// accepts them.
var jwkAlgorithms = map[jose.KeyAlgorithm]bool{jose.RSA_OAEP: true, jose.RSA_OAEP_256: true,
	jose.ECDH_ES_A128KW: true, jose.ECDH_ES_A192KW: true, jose.ECDH_ES_A256KW: true}

// parsePublicKey reads b as ocicrypt reads a JWE recipient: a PKIX
// public key in DER or PEM, else a JWK. It returns the key and the JWE
// key algorithm that wraps to it: RSA-OAEP for RSA, ECDH-ES+A256KW for
// EC, or the algorithm the JWK names. A private key, a certificate or
// another kind of key is refused.
func parsePublicKey(b []byte) (any, jose.KeyAlgorithm, error) {
	der := b
	if block, _ := pem.Decode(b); block != nil {
		if block.Type != "PUBLIC KEY" {
			return nil, "", fmt.Errorf("a PEM %q block, not a PUBLIC KEY: %w", block.Type, ErrRecipient)
		}
		der = block.Bytes
	}
	if key, err := x509.ParsePKIXPublicKey(der); err == nil {
		return algorithmFor(key)
	}
	var jwk jose.JSONWebKey
	if err := jwk.UnmarshalJSON(b); err != nil {
		return nil, "", fmt.Errorf("neither a PKIX public key nor a JWK: %v: %w", err, ErrRecipient)
	}
	if !jwk.IsPublic() {
		return nil, "", fmt.Errorf("a private JWK: give the public key: %w", ErrRecipient)
	}
	if jwk.Algorithm == "" {
		_, alg, err := algorithmFor(jwk.Key)
		return &jwk, alg, err
	}
	alg := jose.KeyAlgorithm(jwk.Algorithm)
	if !jwkAlgorithms[alg] {
		return nil, "", fmt.Errorf("JWK algorithm %s is not a JWE key algorithm ocicrypt reads: %w", alg, ErrRecipient)
	}
	return &jwk, alg, nil
}

// algorithmFor returns key with the JWE key algorithm that wraps to it.
func algorithmFor(key any) (any, jose.KeyAlgorithm, error) {
	switch key.(type) {
	case *rsa.PublicKey:
		return key, jose.RSA_OAEP, nil
	case *ecdsa.PublicKey:
		return key, jose.ECDH_ES_A256KW, nil
	}
	return nil, "", fmt.Errorf("a %T, not an RSA or EC public key: %w", key, ErrRecipient)
}

// readKeyFile reads the regular file path of at most maxKeyFile bytes.
func readKeyFile(path string) ([]byte, error) {
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
		return nil, fmt.Errorf("%s is a %s, not a regular file: %w", path, fi.Mode().Type(), ErrRecipient)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxKeyFile {
		return nil, fmt.Errorf("%s has more than %d bytes: %w", path, maxKeyFile, ErrRecipient)
	}
	return b, nil
}

// layerCipher encrypts one layer as ocicrypt's AES-256-CTR with
// HMAC-SHA256 does, under a fresh key and nonce. The same layerCipher
// encrypts the same plain bytes to the same ciphertext, so that the layer
// can be hashed in one pass and written in the next.
type layerCipher struct {
	key, nonce []byte
}

func newLayerCipher() (*layerCipher, error) {
	c := &layerCipher{key: make([]byte, 32), nonce: make([]byte, aes.BlockSize)}
	if _, err := rand.Read(c.key); err != nil {
		return nil, err
	}
	if _, err := rand.Read(c.nonce); err != nil {
		return nil, err
	}
	return c, nil
}

// ctrReader is the ciphertext of r, MACed as it is read.
type ctrReader struct {
	r   io.Reader
	s   cipher.Stream
	mac hash.Hash
	eof bool
}

func (c *ctrReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.s.XORKeyStream(p[:n], p[:n])
	c.mac.Write(p[:n])
	if err == io.EOF {
		c.eof = true
	}
	return n, err
}

// encrypt returns the ciphertext of plain as a reader and, once it has
// been read to its end, the HMAC of the ciphertext.
func (c *layerCipher) encrypt(plain io.Reader) (io.Reader, func() ([]byte, error), error) {
	block, err := aes.NewCipher(c.key)
	if err != nil {
		return nil, nil, err
	}
	r := &ctrReader{r: plain, s: cipher.NewCTR(block, c.nonce), mac: hmac.New(sha256.New, c.key)}
	return r, func() ([]byte, error) {
		if !r.eof {
			return nil, errors.New("the layer was not read to its end")
		}
		return r.mac.Sum(nil), nil
	}, nil
}

// privateOptions are the layer's key options that are wrapped to each
// recipient (ocicrypt's PrivateLayerBlockCipherOptions).
type privateOptions struct {
	SymmetricKey  []byte            `json:"symkey"`
	Digest        digest.Digest     `json:"digest"`
	CipherOptions map[string][]byte `json:"cipheroptions"`
}

// publicOptions are the layer cipher's public options (ocicrypt's
// PublicLayerBlockCipherOptions).
type publicOptions struct {
	CipherType    string            `json:"cipher"`
	Hmac          []byte            `json:"hmac"`
	CipherOptions map[string][]byte `json:"cipheroptions"`
}

// annotations returns the layer descriptor's annotations of an encrypted
// layer whose plain digest is diffID, the HMAC that mac returns (after the
// ciphertext was read to its end), its key wrapped to recipients, as
// ocicrypt's EncryptLayer makes them.
func (c *layerCipher) annotations(mac func() ([]byte, error), diffID digest.Digest, recipients []Recipient) (map[string]string, error) {
	sum, err := mac()
	if err != nil {
		return nil, err
	}
	if len(recipients) == 0 {
		return nil, errors.New("no recipient")
	}
	// The private options carry the plain digest, which the decrypting
	// side checks the decrypted layer against.
	priv, err := json.Marshal(privateOptions{SymmetricKey: c.key, Digest: diffID, CipherOptions: map[string][]byte{"nonce": c.nonce}})
	if err != nil {
		return nil, err
	}
	pub, err := json.Marshal(publicOptions{CipherType: cipherAESCTR, Hmac: sum, CipherOptions: map[string][]byte{}})
	if err != nil {
		return nil, err
	}
	rs := make([]jose.Recipient, len(recipients))
	for i, r := range recipients {
		rs[i] = jose.Recipient{Algorithm: r.alg, Key: r.key}
	}
	enc, err := jose.NewMultiEncrypter(jose.A256GCM, rs, nil)
	if err != nil {
		return nil, fmt.Errorf("wrap the layer key: %w", err)
	}
	obj, err := enc.Encrypt(priv)
	if err != nil {
		return nil, fmt.Errorf("wrap the layer key: %w", err)
	}
	return map[string]string{
		AnnotationKeysJWE: base64.StdEncoding.EncodeToString([]byte(obj.FullSerialize())),
		AnnotationPubOpts: base64.StdEncoding.EncodeToString(pub),
	}, nil
}
