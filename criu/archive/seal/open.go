package seal

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"

	"filippo.io/age"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// Errors callers branch on.
var (
	// ErrUntrusted: the archive's signature is missing, malformed, made
	// by a key the trust policy does not trust, or does not match the
	// archive's bytes. The message says which.
	ErrUntrusted = errdefs.New(errdefs.ErrInvalidArgument, "checkpoint archive refused by the trust policy")
	// ErrNoIdentity: the archive is encrypted and none of this node's age
	// identities is one of its recipients.
	ErrNoIdentity = errdefs.New(errdefs.ErrNotSupported, "no identity of this node matches the archive's recipients")
)

// ageMagic starts every age file (age-encryption.org/v1).
const ageMagic = "age-encryption.org/v1\n"

// OpenOptions say how an archive is checked and decrypted.
type OpenOptions struct {
	// Policy, when set, is the trust policy the archive's signature must
	// satisfy. Nil checks no signature: nodeshim's behaviour without a
	// configured policy.
	Policy *Policy
	// Identities decrypt encrypted archives.
	Identities []age.Identity
}

// Archive is an opened archive whose signature, if the policy asked for
// one, has been verified.
type Archive struct {
	// Name is the archive's path, for messages.
	Name string
	// Signature is the verified signature, or nil (no policy, or an
	// unsigned archive the policy allows).
	Signature *Signature
	// Encrypted says the archive is an age file.
	Encrypted bool
	// Size is the archive file's size when it was opened.
	Size int64

	f *os.File
	// key decrypts an encrypted archive: the file key Open unwrapped,
	// pinned, so that a file replaced after Open (another age file to
	// the same recipients) fails every read (its header MAC and chunks
	// are keyed by its own file key).
	key age.Identity
	// plain is the decrypted view of an encrypted archive, of plainSize
	// bytes, once Reader made it.
	plain     io.ReaderAt
	plainSize int64
}

// Open checks the archive file f, at path name, before anything reads its
// content: the signature file beside it against o.Policy (present unless
// the policy allows unsigned archives, well-formed, by a trusted key,
// valid), then the SHA-256 and size of f against the signed ones, then,
// for an encrypted archive, that one of o.Identities can decrypt it. Only
// then may the caller read the plain tar with Reader. A refusal wraps
// ErrUntrusted or ErrNoIdentity and names the archive and the reason.
func Open(f *os.File, name string, o OpenOptions) (*Archive, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", name, err)
	}
	a := &Archive{Name: name, Size: fi.Size(), f: f}
	if o.Policy != nil {
		if a.Signature, err = verify(f, name, a.Size, o.Policy); err != nil {
			return nil, err
		}
	}
	magic := make([]byte, len(ageMagic))
	n, err := f.ReadAt(magic, 0)
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	a.Encrypted = n == len(magic) && bytes.Equal(magic, []byte(ageMagic))
	if a.Encrypted {
		// Unwrap the file key now, so that a node without the key is
		// told so before any work starts.
		if len(o.Identities) == 0 {
			return nil, fmt.Errorf("%s is encrypted and no age identity is configured: %w", name, ErrNoIdentity)
		}
		hdr, err := age.ExtractHeader(io.NewSectionReader(f, 0, a.Size))
		if err != nil {
			return nil, fmt.Errorf("decrypt %s: %w", name, err)
		}
		key, err := age.DecryptHeader(hdr, o.Identities...)
		if err != nil {
			return nil, a.decryptError(err, len(o.Identities))
		}
		a.key = age.NewInjectedFileKeyIdentity(key)
	}
	return a, nil
}

// decryptError says that none of n identities matched, or what else
// failed.
func (a *Archive) decryptError(err error, n int) error {
	var nomatch *age.NoIdentityMatchError
	if errors.As(err, &nomatch) {
		return fmt.Errorf("%s: none of the %d configured age identities is a recipient of it: %w", a.Name, n, ErrNoIdentity)
	}
	return fmt.Errorf("decrypt %s: %w", a.Name, err)
}

// Reader returns a reader of the plain tar from its start, decrypting an
// encrypted archive as it reads (age authenticates every 64 KiB chunk and
// the end, so a truncated or altered ciphertext fails the read). Each call
// starts again from the first byte. The reader seeks and reads at any
// offset (io.ReaderAt) without decrypting what it skips: archive/tar
// seeks over the members it is not asked to read, so validating an
// archive decrypts little more than its headers.
func (a *Archive) Reader() (*io.SectionReader, error) {
	raw := io.NewSectionReader(a.f, 0, a.Size)
	if !a.Encrypted {
		return raw, nil
	}
	if a.plain != nil {
		return io.NewSectionReader(a.plain, 0, a.plainSize), nil
	}
	// DecryptReaderAt authenticates the last chunk, and so the plain
	// size, before it returns.
	r, n, err := age.DecryptReaderAt(raw, a.Size, a.key)
	if err != nil {
		return nil, a.changed(err)
	}
	a.plain, a.plainSize = r, n
	return io.NewSectionReader(r, 0, n), nil
}

// Stream returns a reader of the plain tar from its start for one
// sequential pass, the fastest way through an encrypted archive (age's
// streaming decryption; Reader's random access decrypts a chunk at a
// time and is slower for a whole pass). An archive changed after Open
// fails the read: an encrypted one at the first chunk not sealed with the
// file key Open unwrapped (age authenticates each), a signed plain one at
// its end, where the bytes hashed again as they passed are compared with
// the signed digest. Read it to its end (io.Copy to io.Discard after the
// tar) before using what was read.
func (a *Archive) Stream() (io.Reader, error) {
	var raw io.Reader = io.NewSectionReader(a.f, 0, a.Size)
	if !a.Encrypted {
		if a.Signature != nil {
			raw = &rehash{r: raw, h: sha256.New(), want: digestHex(a.Signature.Digest), name: a.Name}
		}
		return raw, nil
	}
	r, err := age.Decrypt(bufio.NewReaderSize(raw, ioChunk), a.key)
	if err != nil {
		return nil, a.changed(err)
	}
	return r, nil
}

// changed is the refusal of an encrypted archive that no longer decrypts
// with the file key Open unwrapped from it.
func (a *Archive) changed(err error) error {
	return untrusted(a.Name, "the encrypted archive is corrupt or changed after it was opened (%v)", err)
}

// rehash hashes the archive's bytes as a pass reads them and, at their
// end, fails the read unless they are still the bytes verified: the file
// may be rewritten between Open's check and the pass that unpacks it.
type rehash struct {
	r    io.Reader
	h    hash.Hash
	want string
	name string
}

func (x *rehash) Read(p []byte) (int, error) {
	n, err := x.r.Read(p)
	x.h.Write(p[:n])
	if err == io.EOF && hex.EncodeToString(x.h.Sum(nil)) != x.want {
		return n, untrusted(x.name, "digest mismatch: the archive changed after it was verified")
	}
	return n, err
}

// untrusted is a refusal naming the archive and why.
func untrusted(name, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", name, fmt.Sprintf(format, args...), ErrUntrusted)
}

// verify checks the signature file of the archive f (name, size bytes)
// against p and returns the verified signature, or nil for an unsigned
// archive p allows.
func verify(f *os.File, name string, size int64, p *Policy) (*Signature, error) {
	sigPath := name + SignatureSuffix
	b, err := readSmall(sigPath)
	if errors.Is(err, fs.ErrNotExist) {
		if p.AllowUnsigned {
			return nil, nil
		}
		return nil, untrusted(name, "unsigned: no signature file %s, and the trust policy does not allow unsigned archives", sigPath)
	}
	if err != nil {
		return nil, untrusted(name, "signature file: %v", err)
	}
	s, err := ParseSignature(b)
	if err != nil {
		return nil, untrusted(name, "signature file %s: %v", sigPath, err)
	}
	if ok, why := p.trusts(s); !ok {
		return nil, untrusted(name, "%s", why)
	}
	if !s.verify() {
		return nil, untrusted(name, "bad signature: %s does not verify with key %s (node %q)", sigPath, s.KeyID, s.Node)
	}
	// The bytes as they are now, against what the node signed.
	if size != s.Size {
		return nil, untrusted(name, "digest mismatch: the archive has %s bytes, the signature says %s", sizeString(size), sizeString(s.Size))
	}
	h := sha256.New()
	n, err := hashPipelined(h, io.NewSectionReader(f, 0, size))
	if err != nil {
		return nil, fmt.Errorf("hash %s: %w", name, err)
	}
	if n != size {
		return nil, untrusted(name, "digest mismatch: the archive shrank to %s bytes while it was hashed", sizeString(n))
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != digestHex(s.Digest) {
		return nil, untrusted(name, "digest mismatch: the archive's sha256 is %s, the signature says %s", got, digestHex(s.Digest))
	}
	return s, nil
}
