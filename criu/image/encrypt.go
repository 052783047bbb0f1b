package image

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/containers/ocicrypt/blockcipher"
	ocicryptconfig "github.com/containers/ocicrypt/config"
	"github.com/containers/ocicrypt/keywrap/jwe"
	encspec "github.com/containers/ocicrypt/spec"
	"github.com/containers/ocicrypt/utils"
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
const MediaTypeLayerEncrypted = encspec.MediaTypeLayerEnc

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
	// key is the public key as read: PEM (PKIX) or a JWK.
	key []byte
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
	key, err := utils.ParsePublicKey(b, "JWE")
	if err != nil {
		return Recipient{}, fmt.Errorf("recipient %q: %v: %w", spec, err, ErrRecipient)
	}
	switch k := key.(type) {
	case *rsa.PublicKey, *ecdsa.PublicKey:
	case *jose.JSONWebKey:
		if !k.IsPublic() {
			return Recipient{}, fmt.Errorf("recipient %q: a private JWK: give the public key: %w", spec, ErrRecipient)
		}
	default:
		return Recipient{}, fmt.Errorf("recipient %q: a %T, not an RSA or EC public key: %w", spec, key, ErrRecipient)
	}
	return Recipient{Spec: spec, key: b}, nil
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

// layerCipher encrypts one layer with ocicrypt's AES-256-CTR with
// HMAC-SHA256 under a fresh key and nonce. The same layerCipher encrypts
// the same plain bytes to the same ciphertext, so that the layer can be
// hashed in one pass and written in the next.
type layerCipher struct {
	opts blockcipher.LayerBlockCipherOptions
}

func newLayerCipher() (*layerCipher, error) {
	key, nonce := make([]byte, 32), make([]byte, 16)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return &layerCipher{opts: blockcipher.LayerBlockCipherOptions{Private: blockcipher.PrivateLayerBlockCipherOptions{
		SymmetricKey: key, CipherOptions: map[string][]byte{"nonce": nonce}}}}, nil
}

// encrypt returns the ciphertext of plain as a reader and, once it has
// been read to its end, the options that decrypt it.
func (c *layerCipher) encrypt(plain io.Reader) (io.Reader, blockcipher.Finalizer, error) {
	bc, err := blockcipher.NewAESCTRLayerBlockCipher(256)
	if err != nil {
		return nil, nil, err
	}
	return bc.Encrypt(plain, c.opts)
}

// annotations returns the layer descriptor's annotations of an encrypted
// layer whose plain digest is diffID, its cipher options fin (after the
// ciphertext was read to its end), wrapped to recipients, as ocicrypt's
// EncryptLayer makes them.
func annotations(fin blockcipher.Finalizer, diffID digest.Digest, recipients []Recipient) (map[string]string, error) {
	opts, err := fin()
	if err != nil {
		return nil, err
	}
	opts.Public.CipherType = blockcipher.AES256CTR
	if opts.Public.CipherOptions == nil {
		opts.Public.CipherOptions = map[string][]byte{}
	}
	// The private options carry the plain digest, which the decrypting
	// side checks the decrypted layer against.
	opts.Private.Digest = diffID
	priv, err := json.Marshal(opts.Private)
	if err != nil {
		return nil, err
	}
	pub, err := json.Marshal(opts.Public)
	if err != nil {
		return nil, err
	}
	keys := make([][]byte, len(recipients))
	for i, r := range recipients {
		keys[i] = r.key
	}
	if len(keys) == 0 {
		return nil, errors.New("no recipient")
	}
	wrapped, err := jwe.NewKeyWrapper().WrapKeys(&ocicryptconfig.EncryptConfig{Parameters: map[string][][]byte{"pubkeys": keys}}, priv)
	if err != nil {
		return nil, fmt.Errorf("wrap the layer key: %w", err)
	}
	return map[string]string{
		AnnotationKeysJWE: base64.StdEncoding.EncodeToString(wrapped),
		AnnotationPubOpts: base64.StdEncoding.EncodeToString(pub),
	}, nil
}
