package seal

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/nodeshim/nodeshim/criu/archive"
	"github.com/nodeshim/nodeshim/criu/archive/archivetest"
	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// marker stands for a secret in the checkpointed memory.
const marker = "nodeshim-seal-test-marker-3c1e0a"

// testKeys are one node's keys for a test.
type testKeys struct {
	id     *age.X25519Identity
	signer Signer
	pub    ed25519.PublicKey
}

func newKeys(t testing.TB, node string) testKeys {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return testKeys{id: id, signer: Signer{Node: node, Key: priv}, pub: pub}
}

// plainTar is a valid archive holding the marker.
func plainTar(t testing.TB) []byte {
	return archivetest.Tar(t, archivetest.With(archivetest.Member{Name: "checkpoint/pages-1.img", Type: '0', Body: strings.Repeat(marker, 4096)}))
}

// write seals content into dir/name.tar as o says and returns its path.
func write(t testing.TB, dir string, content []byte, o WriteOptions) string {
	t.Helper()
	path := filepath.Join(dir, "checkpoint-a_b-c-2026-01-01T00:00:00Z.tar")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := NewWriter(f, o)
	if err != nil {
		t.Fatal(err)
	}
	// In pieces, as the archive writer writes.
	for b := content; len(b) > 0; {
		n := min(len(b), 10000)
		if _, err := w.Write(b[:n]); err != nil {
			t.Fatal(err)
		}
		b = b[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, _ := f.Stat(); fi.Size() != w.Stored() {
		t.Fatalf("Stored() = %d, file has %d bytes", w.Stored(), fi.Size())
	}
	if err := w.Seal(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// open opens path as o says and reads the whole plain tar twice, through
// Reader and through Stream (as Restore does: validate, then unpack).
func open(t testing.TB, path string, o OpenOptions) ([]byte, *Archive, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	a, err := Open(f, path, o)
	if err != nil {
		return nil, nil, err
	}
	var first []byte
	for i := range 2 {
		var r io.Reader
		if i == 0 {
			r, err = a.Reader()
		} else {
			r, err = a.Stream()
		}
		if err != nil {
			return nil, a, err
		}
		b, err := io.ReadAll(r)
		if err != nil {
			return nil, a, err
		}
		if first != nil && !bytes.Equal(first, b) {
			t.Fatal("the second read differs from the first")
		}
		first = b
	}
	return first, a, nil
}

func trustAll(ks ...testKeys) *Policy {
	p := &Policy{}
	for _, k := range ks {
		p.Keys = append(p.Keys, TrustedKey{KeyID: KeyID(k.pub), Node: k.signer.Node})
	}
	return p
}

func TestRoundTrip(t *testing.T) {
	k := newKeys(t, "node-a")
	content := plainTar(t)
	for _, tc := range []struct {
		name      string
		w         WriteOptions
		o         OpenOptions
		encrypted bool
	}{
		{name: "plain, no policy", w: WriteOptions{}, o: OpenOptions{}},
		{name: "plain, signed", w: WriteOptions{Signer: &k.signer}, o: OpenOptions{Policy: trustAll(k)}},
		{name: "encrypted, no policy", w: WriteOptions{Recipients: []age.Recipient{k.id.Recipient()}}, o: OpenOptions{Identities: []age.Identity{k.id}}, encrypted: true},
		{name: "encrypted and signed", w: WriteOptions{Recipients: []age.Recipient{k.id.Recipient()}, Signer: &k.signer}, o: OpenOptions{Policy: trustAll(k), Identities: []age.Identity{k.id}}, encrypted: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := write(t, t.TempDir(), content, tc.w)
			stored, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if got := bytes.Contains(stored, []byte(marker)); got == tc.encrypted {
				t.Fatalf("marker in the stored archive: %v, encrypted: %v", got, tc.encrypted)
			}
			if tc.encrypted && !bytes.HasPrefix(stored, []byte(ageMagic)) {
				t.Fatalf("encrypted archive starts with %q, not an age header", stored[:min(len(stored), 30)])
			}
			got, a, err := open(t, path, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, content) {
				t.Fatalf("read %d bytes, wrote %d: they differ", len(got), len(content))
			}
			if a.Encrypted != tc.encrypted {
				t.Errorf("Encrypted = %v, want %v", a.Encrypted, tc.encrypted)
			}
			if (a.Signature != nil) != (tc.w.Signer != nil && tc.o.Policy != nil) {
				t.Errorf("Signature = %+v", a.Signature)
			}
			if a.Signature != nil && (a.Signature.Node != "node-a" || a.Signature.Encrypted != tc.encrypted || a.Signature.Size != int64(len(stored))) {
				t.Errorf("signature %+v does not describe the archive", a.Signature)
			}
			// What was read is a valid checkpoint archive.
			r, _ := a.Reader()
			if _, err := archive.Validate(r); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRefusals: every way an archive's signature can fail is refused at
// Open, before a byte is decrypted or unpacked, with ErrUntrusted (class
// invalid argument) naming the archive and the reason.
func TestRefusals(t *testing.T) {
	k, other := newKeys(t, "node-a"), newKeys(t, "node-b")
	content := plainTar(t)
	sealed := WriteOptions{Recipients: []age.Recipient{k.id.Recipient()}, Signer: &k.signer}
	for _, tc := range []struct {
		name   string
		w      WriteOptions
		policy *Policy
		change func(t *testing.T, path string)
		want   string // in the error; "" means accepted
	}{
		{name: "intact", w: sealed, policy: trustAll(k)},
		{name: "tampered byte", w: sealed, policy: trustAll(k), change: flipByte(1000), want: "digest mismatch"},
		{name: "tampered byte in a plain archive", w: WriteOptions{Signer: &k.signer}, policy: trustAll(k), change: flipByte(600), want: "digest mismatch"},
		{name: "appended byte", w: sealed, policy: trustAll(k), change: appendByte, want: "digest mismatch"},
		{name: "unsigned", w: WriteOptions{Recipients: sealed.Recipients}, policy: trustAll(k), want: "unsigned"},
		{name: "unsigned, allowed", w: WriteOptions{Recipients: sealed.Recipients}, policy: &Policy{AllowUnsigned: true}},
		{name: "signed, unsigned allowed, key unknown", w: sealed, policy: &Policy{AllowUnsigned: true}, want: "unknown key"},
		{name: "unknown key", w: sealed, policy: trustAll(other), want: "unknown key"},
		{name: "empty policy", w: sealed, policy: &Policy{}, want: "unknown key"},
		{name: "key trusted for another node", w: sealed, policy: &Policy{Keys: []TrustedKey{{KeyID: KeyID(k.pub), Node: "node-b"}}}, want: `for node "node-b" only`},
		{name: "trusted by public key", w: sealed, policy: &Policy{Keys: []TrustedKey{{PublicKey: pemPub(t, k.pub)}}}},
		{name: "signed field changed", w: sealed, policy: trustAll(k), change: editSig(`"created": "20`, `"created": "19`), want: "bad signature"},
		{name: "signature of another archive", w: sealed, policy: trustAll(k), change: swapSig(t, k, content), want: "digest mismatch"},
		{name: "signature file garbage", w: sealed, policy: trustAll(k), change: editSig(`"format"`, `"formats"`), want: "signature file"},
		{name: "signature file a directory", w: WriteOptions{Recipients: sealed.Recipients}, policy: trustAll(k), change: sigDir, want: "signature file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := write(t, t.TempDir(), content, tc.w)
			if tc.change != nil {
				tc.change(t, path)
			}
			got, _, err := open(t, path, OpenOptions{Policy: tc.policy, Identities: []age.Identity{k.id}})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, content) {
					t.Fatal("content differs")
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted; want a refusal with %q", tc.want)
			}
			if !errors.Is(err, ErrUntrusted) || !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("error %v is not ErrUntrusted of class invalid argument", err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the archive and %q", err, tc.want)
			}
		})
	}
}

func flipByte(off int64) func(*testing.T, string) {
	return func(t *testing.T, path string) {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, off); err != nil {
			t.Fatal(err)
		}
		b[0] ^= 0x01
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
}

func appendByte(t *testing.T, path string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
}

func editSig(old, new string) func(*testing.T, string) {
	return func(t *testing.T, path string) {
		b, err := os.ReadFile(path + SignatureSuffix)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(old)) {
			t.Fatalf("signature file has no %q:\n%s", old, b)
		}
		if err := os.WriteFile(path+SignatureSuffix, bytes.Replace(b, []byte(old), []byte(new), 1), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// swapSig puts beside the archive the valid signature of another archive
// by the same key.
func swapSig(t *testing.T, k testKeys, content []byte) func(*testing.T, string) {
	return func(t *testing.T, path string) {
		other := write(t, t.TempDir(), append(bytes.Clone(content), make([]byte, 512)...), WriteOptions{Signer: &k.signer})
		b, err := os.ReadFile(other + SignatureSuffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path+SignatureSuffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func sigDir(t *testing.T, path string) {
	if err := os.Mkdir(path+SignatureSuffix, 0o700); err != nil {
		t.Fatal(err)
	}
}

func pemPub(t testing.TB, pub ed25519.PublicKey) string {
	b, err := marshalPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestWrongIdentity: a node whose identities are not among the archive's
// recipients is told so, naming the archive, at Open.
func TestWrongIdentity(t *testing.T) {
	k, other := newKeys(t, "node-a"), newKeys(t, "node-b")
	path := write(t, t.TempDir(), plainTar(t), WriteOptions{Recipients: []age.Recipient{k.id.Recipient()}, Signer: &k.signer})
	for _, tc := range []struct {
		name string
		ids  []age.Identity
		want string
	}{
		{name: "another node's identity", ids: []age.Identity{other.id}, want: "none of the 1 configured age identities"},
		{name: "no identity", ids: nil, want: "no age identity is configured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := open(t, path, OpenOptions{Policy: trustAll(k), Identities: tc.ids})
			if !errors.Is(err, ErrNoIdentity) || !errors.Is(err, errdefs.ErrNotSupported) {
				t.Fatalf("error %v is not ErrNoIdentity of class not supported", err)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not name the archive and %q", err, tc.want)
			}
		})
	}
}

// TestKeyRotation: a directory of identities decrypts archives sealed to
// the retired key and to the new one; removing the old key's file makes
// the old archives unreadable, and says so.
func TestKeyRotation(t *testing.T) {
	old, cur := newKeys(t, "node-a"), newKeys(t, "node-a")
	dir := t.TempDir()
	content := plainTar(t)
	oldArchive := write(t, t.TempDir(), content, WriteOptions{Recipients: []age.Recipient{old.id.Recipient()}})
	newArchive := write(t, t.TempDir(), content, WriteOptions{Recipients: []age.Recipient{cur.id.Recipient()}})
	keyDir := filepath.Join(dir, "keys")
	if err := os.Mkdir(keyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeKey := func(name string, k testKeys) {
		body := "# created: " + time.Now().Format(time.RFC3339) + "\n# public key: " + k.id.Recipient().String() + "\n" + k.id.String() + "\n"
		if err := os.WriteFile(filepath.Join(keyDir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeKey("2026-01.key", old)
	writeKey("2026-06.key", cur)
	// A Secret volume's hidden entries are not keys.
	if err := os.Mkdir(filepath.Join(keyDir, "..data"), 0o700); err != nil {
		t.Fatal(err)
	}
	ids, err := LoadIdentities([]string{keyDir})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2 {
		t.Fatalf("loaded %d identities, want 2", len(ids))
	}
	for _, p := range []string{oldArchive, newArchive} {
		got, _, err := open(t, p, OpenOptions{Identities: ids})
		if err != nil || !bytes.Equal(got, content) {
			t.Fatalf("%s with both keys: %v", p, err)
		}
	}
	if err := os.Remove(filepath.Join(keyDir, "2026-01.key")); err != nil {
		t.Fatal(err)
	}
	ids, err = LoadIdentities([]string{keyDir})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := open(t, oldArchive, OpenOptions{Identities: ids}); !errors.Is(err, ErrNoIdentity) {
		t.Fatalf("old archive without the old key: %v, want ErrNoIdentity", err)
	}
}

func TestParseRecipients(t *testing.T) {
	k := newKeys(t, "node-a")
	file := filepath.Join(t.TempDir(), "recipients")
	if err := os.WriteFile(file, []byte("# node b\n"+k.id.Recipient().String()+"\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		specs []string
		n     int
		want  string
	}{
		{name: "string", specs: []string{k.id.Recipient().String()}, n: 1},
		{name: "file and string", specs: []string{file, k.id.Recipient().String()}, n: 2},
		{name: "bad string", specs: []string{"age1notakey"}, want: `recipient "age1notakey"`},
		{name: "missing file", specs: []string{"/nonexistent/recipients"}, want: "/nonexistent/recipients"},
		{name: "identity as recipient", specs: []string{writeTemp(t, k.id.String())}, want: "unknown recipient type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := ParseRecipients(tc.specs)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want %q", err, tc.want)
				}
				if strings.Contains(err.Error(), "AGE-SECRET-KEY") {
					t.Fatalf("error %q shows a secret key", err)
				}
				return
			}
			if err != nil || len(rs) != tc.n {
				t.Fatalf("%d recipients, %v; want %d", len(rs), err, tc.n)
			}
		})
	}
}

func writeTemp(t testing.TB, body string) string {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSigningKeyFile(t *testing.T) {
	k := newKeys(t, "node-a")
	b, err := marshalSigningKey(k.signer.Key)
	if err != nil {
		t.Fatal(err)
	}
	got, err := LoadSigningKey(writeTemp(t, string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(k.signer.Key) {
		t.Fatal("loaded key differs")
	}
	for _, bad := range []string{"", "not pem", string(pemPub(t, k.pub))} {
		if _, err := LoadSigningKey(writeTemp(t, bad)); err == nil || !strings.Contains(err.Error(), "signing key") {
			t.Errorf("key file %q: error %v", bad, err)
		}
	}
}

// TestSignFile: an archive written elsewhere and signed in place opens
// under a policy that trusts the key, and a changed byte is refused.
func TestSignFile(t *testing.T) {
	k := newKeys(t, "node-a")
	content := plainTar(t)
	path := filepath.Join(t.TempDir(), "a.tar")
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := SignFile(path, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + SignatureSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("signed without a signer: %v", err)
	}
	if err := SignFile(path, WriteOptions{Signer: &k.signer}); err != nil {
		t.Fatal(err)
	}
	got, a, err := open(t, path, OpenOptions{Policy: trustAll(k)})
	if err != nil || !bytes.Equal(got, content) || a.Signature == nil || a.Signature.Encrypted {
		t.Fatalf("open: %v, signature %+v", err, a)
	}
	flipByte(700)(t, path)
	if _, _, err := open(t, path, OpenOptions{Policy: trustAll(k)}); !errors.Is(err, ErrUntrusted) {
		t.Fatalf("changed byte: %v, want ErrUntrusted", err)
	}
}

// TestChangedAfterVerification: an archive rewritten between Open and the
// pass that unpacks it (same size; for the encrypted one a valid age file
// to the same recipient) fails that pass: the plain one at its end with
// ErrUntrusted, the encrypted one as soon as a chunk is not sealed with
// the file key Open unwrapped.
func TestChangedAfterVerification(t *testing.T) {
	k := newKeys(t, "node-a")
	content := plainTar(t)
	for _, tc := range []struct {
		name string
		w    WriteOptions
	}{
		{"plain", WriteOptions{Signer: &k.signer}},
		{"encrypted", WriteOptions{Signer: &k.signer, Recipients: []age.Recipient{k.id.Recipient()}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := write(t, t.TempDir(), content, tc.w)
			// The replacement: the same tar with one byte changed, sealed
			// the same way but never signed.
			changed := bytes.Clone(content)
			changed[len(changed)/2] ^= 0x01
			other := write(t, t.TempDir(), changed, WriteOptions{Recipients: tc.w.Recipients})
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			a, err := Open(f, path, OpenOptions{Policy: trustAll(k), Identities: []age.Identity{k.id}})
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(other)
			if err != nil {
				t.Fatal(err)
			}
			w, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if n, err := w.WriteAt(b, 0); err != nil || int64(n) != a.Size {
				t.Fatalf("rewrote %d of %d bytes: %v", n, a.Size, err)
			}
			w.Close()
			r, err := a.Stream()
			if err == nil {
				_, err = io.Copy(io.Discard, r)
			}
			if tc.w.Recipients == nil && (!errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), "changed after it was verified")) {
				t.Fatalf("reading the rewritten archive: %v, want ErrUntrusted", err)
			}
			if tc.w.Recipients != nil && !errors.Is(err, ErrUntrusted) {
				t.Fatalf("the rewritten encrypted archive: %v, want ErrUntrusted", err)
			}
			if r, err := a.Reader(); err == nil {
				if _, err := io.Copy(io.Discard, r); err == nil && tc.w.Recipients != nil {
					t.Fatal("random access read the rewritten encrypted archive")
				}
			}
		})
	}
}
