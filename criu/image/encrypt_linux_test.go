package image

import (
	"archive/tar"
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containers/ocicrypt"
	"github.com/containers/ocicrypt/blockcipher"
	ocicryptconfig "github.com/containers/ocicrypt/config"
	"github.com/containers/ocicrypt/keywrap/jwe"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/criu/archive/seal/sealtest"
	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// imageParts are the index, manifest and blobs of an image archive.
type imageParts struct {
	files map[string][]byte
	index ocispec.Index
	man   ocispec.Manifest
}

func parts(t *testing.T, b []byte) imageParts {
	t.Helper()
	p := imageParts{files: tarFiles(t, b)}
	if err := json.Unmarshal(p.files[ocispec.ImageIndexFile], &p.index); err != nil || len(p.index.Manifests) != 1 {
		t.Fatalf("index.json: %v %+v", err, p.index)
	}
	if err := json.Unmarshal(p.files["blobs/sha256/"+p.index.Manifests[0].Digest.Encoded()], &p.man); err != nil || len(p.man.Layers) != 1 {
		t.Fatalf("manifest: %v %+v", err, p.man)
	}
	return p
}

func (p imageParts) layer() []byte { return p.files["blobs/sha256/"+p.man.Layers[0].Digest.Encoded()] }

// decrypt decrypts the image's layer with ocicrypt's own DecryptLayer,
// what podman (containers/image) and containerd's imgcrypt call, given
// the private key file priv.
func decrypt(t *testing.T, p imageParts, priv string) ([]byte, digest.Digest, error) {
	t.Helper()
	key, err := os.ReadFile(priv)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := ocicryptconfig.DecryptWithPrivKeys([][]byte{key}, [][]byte{nil})
	if err != nil {
		t.Fatal(err)
	}
	r, d, err := ocicrypt.DecryptLayer(cc.DecryptConfig, bytes.NewReader(p.layer()), p.man.Layers[0], false)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(r)
	return b, d, err
}

// privateOpts unwraps the layer's private cipher options with priv.
func privateOpts(t *testing.T, l ocispec.Descriptor, priv string) blockcipher.PrivateLayerBlockCipherOptions {
	t.Helper()
	key, err := os.ReadFile(priv)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := ocicryptconfig.DecryptWithPrivKeys([][]byte{key}, [][]byte{nil})
	if err != nil {
		t.Fatal(err)
	}
	wrapped, err := base64.StdEncoding.DecodeString(l.Annotations[AnnotationKeysJWE])
	if err != nil {
		t.Fatal(err)
	}
	b, err := jwe.NewKeyWrapper().UnwrapKey(cc.DecryptConfig, wrapped)
	if err != nil {
		t.Fatal(err)
	}
	var o blockcipher.PrivateLayerBlockCipherOptions
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatal(err)
	}
	return o
}

// TestEncryptedImage: with recipients, the layer of a real checkpoint is
// encrypted as ocicrypt encrypts one (its media type, its annotations)
// and holds none of the plain layer's bytes; ocicrypt's DecryptLayer
// with the private key of either recipient (RSA, EC) gives back exactly
// the plain image's layer, named by the config's diff_id; a third key
// decrypts nothing.
func TestEncryptedImage(t *testing.T) {
	archive := realArchive(t)
	keys := t.TempDir()
	rsaKey := sealtest.NewJWEKey(t, keys, "rsa", false)
	ecKey := sealtest.NewJWEKey(t, keys, "ec", true)
	other := sealtest.NewJWEKey(t, keys, "other", true)
	var recipients []Recipient
	for _, k := range []sealtest.JWEKey{rsaKey, ecKey} {
		r, err := ParseRecipient(JWEScheme + k.PublicFile)
		if err != nil {
			t.Fatal(err)
		}
		recipients = append(recipients, r)
	}

	plainImg, plainOut := build(t, archive, "localhost/enc:1")
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out bytes.Buffer
	img, err := WriteWith(f, "localhost/enc:1", &out, Options{Recipients: recipients})
	if err != nil {
		t.Fatal(err)
	}
	if !img.Encrypted || img.DiffID != plainImg.Layer || img.Layer == plainImg.Layer || img.Size != plainImg.Size {
		t.Errorf("encrypted image %+v, plain %+v", img, plainImg)
	}
	plain, enc := parts(t, plainOut), parts(t, out.Bytes())
	l := enc.man.Layers[0]
	if l.MediaType != "application/vnd.oci.image.layer.v1.tar+encrypted" || l.Annotations[AnnotationKeysJWE] == "" || l.Annotations[AnnotationPubOpts] == "" {
		t.Errorf("layer descriptor %+v", l)
	}
	var cfg ocispec.Image
	if err := json.Unmarshal(enc.files["blobs/sha256/"+enc.man.Config.Digest.Encoded()], &cfg); err != nil || cfg.RootFS.DiffIDs[0] != img.DiffID {
		t.Errorf("config %+v: %v", cfg.RootFS, err)
	}
	if enc.man.Annotations[PodmanName] == "" || enc.man.Annotations[CRIUName] == "" {
		t.Errorf("the encrypted image lost the checkpoint annotations: %v", enc.man.Annotations)
	}
	// No 4 KiB run of the plain layer (CRIU's images, config.dump) is in
	// the encrypted one.
	for off := 0; off+4096 <= len(plain.layer()); off += 64 << 10 {
		if bytes.Contains(enc.layer(), plain.layer()[off:off+4096]) {
			t.Fatalf("the encrypted layer holds plain bytes at %d", off)
		}
	}
	for _, k := range []sealtest.JWEKey{rsaKey, ecKey} {
		got, _, err := decrypt(t, enc, k.PrivateFile)
		if err != nil {
			t.Fatalf("decrypt with %s: %v", filepath.Base(k.PrivateFile), err)
		}
		if !bytes.Equal(got, plain.layer()) {
			t.Errorf("decrypted with %s: %d bytes; want the plain layer's %d bytes", filepath.Base(k.PrivateFile), len(got), len(plain.layer()))
		}
		// The wrapped options carry the plain digest, which
		// containers/image checks the decrypted layer against.
		if d := privateOpts(t, l, k.PrivateFile).Digest; d != img.DiffID {
			t.Errorf("the private options name %s, not the diff_id %s", d, img.DiffID)
		}
	}
	if _, _, err := decrypt(t, enc, other.PrivateFile); err == nil {
		t.Error("a key that is no recipient decrypted the layer")
	}

	// A flipped byte of the ciphertext fails ocicrypt's HMAC.
	flipped := imageParts{files: map[string][]byte{}, index: enc.index, man: enc.man}
	for k, v := range enc.files {
		flipped.files[k] = v
	}
	bad := bytes.Clone(enc.layer())
	bad[len(bad)/2] ^= 1
	flipped.files["blobs/sha256/"+enc.man.Layers[0].Digest.Encoded()] = bad
	if _, _, err := decrypt(t, flipped, rsaKey.PrivateFile); err == nil {
		t.Error("a changed ciphertext decrypted")
	}
}

// TestSignedImageVerify: a signed image verifies against a policy that
// trusts its node; Verify refuses an unsigned image, an unknown key, a
// key trusted for another node, a changed manifest annotation and a
// changed layer byte, each naming why, before anything is decrypted.
func TestSignedImageVerify(t *testing.T) {
	archive := realArchive(t)
	keys := t.TempDir()
	r, err := ParseRecipient(JWEScheme + sealtest.NewJWEKey(t, keys, "n", true).PublicFile)
	if err != nil {
		t.Fatal(err)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 28, 7, 0, 0, 0, time.UTC)
	write := func(o Options) []byte {
		f, err := os.Open(archive)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var out bytes.Buffer
		img, err := WriteWith(f, "localhost/signed:1", &out, o)
		if err != nil {
			t.Fatal(err)
		}
		if (o.Signer != nil) != (img.SignedBy != "") {
			t.Errorf("SignedBy %q with signer %v", img.SignedBy, o.Signer != nil)
		}
		return out.Bytes()
	}
	signed := write(Options{Recipients: []Recipient{r}, Signer: &seal.Signer{Key: priv, Node: "node-a"}, Now: func() time.Time { return now }})
	unsigned := write(Options{Recipients: []Recipient{r}})

	trusts := &seal.Policy{Keys: []seal.TrustedKey{{KeyID: seal.KeyID(pub), Node: "node-a"}}}
	sig, err := Verify(bytes.NewReader(signed), "signed.tar", trusts)
	if err != nil || sig == nil || sig.Node != "node-a" || !sig.Encrypted {
		t.Fatalf("Verify of a signed image: %+v, %v", sig, err)
	}
	if sig, err := Verify(bytes.NewReader(unsigned), "unsigned.tar", &seal.Policy{AllowUnsigned: true}); err != nil || sig != nil {
		t.Errorf("Verify of an unsigned image under allowUnsigned: %v, %v", sig, err)
	}

	otherPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		image  []byte
		policy *seal.Policy
		why    string
	}{
		{"unsigned", unsigned, trusts, "unsigned"},
		{"unknown key", signed, &seal.Policy{Keys: []seal.TrustedKey{{KeyID: seal.KeyID(otherPub)}}}, "unknown key"},
		{"another node's key", signed, &seal.Policy{Keys: []seal.TrustedKey{{KeyID: seal.KeyID(pub), Node: "node-b"}}}, "trusted for node"},
		{"manifest changed", changeManifest(t, signed), trusts, "digest mismatch"},
		{"layer byte changed", changeLayer(t, signed), trusts, "has digest"},
		{"signature of another image", swapSignature(t, signed, write(Options{Recipients: []Recipient{r}, Signer: &seal.Signer{Key: priv, Node: "node-a"}})), trusts, "digest mismatch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Verify(bytes.NewReader(tt.image), "image.tar", tt.policy)
			if !errors.Is(err, seal.ErrUntrusted) || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.why) {
				t.Errorf("Verify: %v; want ErrUntrusted saying %q", err, tt.why)
			}
		})
	}
}

// rebuild returns the image archive b after change edited its members
// and its index.
func rebuild(t *testing.T, b []byte, change func(files map[string][]byte, idx *ocispec.Index)) []byte {
	t.Helper()
	files := tarFiles(t, b)
	var idx ocispec.Index
	if err := json.Unmarshal(files[ocispec.ImageIndexFile], &idx); err != nil {
		t.Fatal(err)
	}
	change(files, &idx)
	var err error
	if files[ocispec.ImageIndexFile], err = json.Marshal(idx); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		h := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(files[name])), Typeflag: tar.TypeReg}
		if strings.HasSuffix(name, "/") {
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(files[name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// changeManifest edits the manifest of an image archive as an attacker
// would: the changed manifest under its new digest, the index naming it,
// the signature annotation kept.
func changeManifest(t *testing.T, b []byte) []byte {
	return rebuild(t, b, func(files map[string][]byte, idx *ocispec.Index) {
		old := idx.Manifests[0].Digest
		man := bytes.Replace(files["blobs/sha256/"+old.Encoded()], []byte(`"io.podman.annotations.checkpoint.name":"`), []byte(`"io.podman.annotations.checkpoint.name":"x`), 1)
		delete(files, "blobs/sha256/"+old.Encoded())
		d := digest.FromBytes(man)
		files["blobs/sha256/"+d.Encoded()] = man
		idx.Manifests[0].Digest, idx.Manifests[0].Size = d, int64(len(man))
	})
}

// changeLayer flips a byte of the layer, keeping its name.
func changeLayer(t *testing.T, b []byte) []byte {
	return rebuild(t, b, func(files map[string][]byte, idx *ocispec.Index) {
		for name, data := range files {
			if len(data) > 1<<16 {
				data = bytes.Clone(data)
				data[len(data)/3] ^= 1
				files[name] = data
			}
		}
	})
}

// swapSignature puts the signature annotation of from's index into b's.
func swapSignature(t *testing.T, b, from []byte) []byte {
	t.Helper()
	var src ocispec.Index
	if err := json.Unmarshal(tarFiles(t, from)[ocispec.ImageIndexFile], &src); err != nil {
		t.Fatal(err)
	}
	sig := src.Manifests[0].Annotations[SignatureAnnotation]
	if _, err := base64.StdEncoding.DecodeString(sig); err != nil || sig == "" {
		t.Fatalf("signature annotation %q: %v", sig, err)
	}
	return rebuild(t, b, func(_ map[string][]byte, idx *ocispec.Index) {
		idx.Manifests[0].Annotations[SignatureAnnotation] = sig
	})
}

func pemPublic(t *testing.T, pub crypto.PublicKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func TestParseRecipient(t *testing.T) {
	dir := t.TempDir()
	k := sealtest.NewJWEKey(t, dir, "k", false)
	ec := sealtest.NewJWEKey(t, dir, "ec", true)
	_, edPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	edFile := filepath.Join(dir, "ed.pub.pem")
	if err := os.WriteFile(edFile, pemPublic(t, edPriv.Public()), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, spec string
		ok         bool
	}{
		{"RSA public key", "jwe:" + k.PublicFile, true},
		{"EC public key", "jwe:" + ec.PublicFile, true},
		{"a private key", "jwe:" + k.PrivateFile, false},
		{"an ed25519 key", "jwe:" + edFile, false},
		{"no scheme", k.PublicFile, false},
		{"pgp", "pgp:someone@example.com", false},
		{"relative path", "jwe:k.pub.pem", false},
		{"missing file", "jwe:" + filepath.Join(dir, "none.pem"), false},
		{"a directory", "jwe:" + dir, false},
		{"not a key", "jwe:/proc/self/status", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRecipient(tt.spec)
			if tt.ok != (err == nil) {
				t.Fatalf("ParseRecipient(%q) = %+v, %v", tt.spec, r, err)
			}
			if err != nil && !strings.Contains(err.Error(), tt.spec) {
				t.Errorf("the error does not name the recipient: %v", err)
			}
		})
	}
}
