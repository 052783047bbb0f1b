package seal

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"time"

	"filippo.io/age"

	"github.com/nodeshim/nodeshim/internal/atomicfile"
)

// ioChunk is the size of the reads and writes of archive bytes.
const ioChunk = 1 << 20

// WriteOptions say how an archive is sealed. The zero value writes a
// plain, unsigned archive.
type WriteOptions struct {
	// Recipients, when any, encrypt the archive to them (an age file).
	Recipients []age.Recipient
	// Signer, when set, signs the archive (Writer.Seal).
	Signer *Signer
	// Now is the clock for the signature; nil means time.Now.
	Now func() time.Time
}

// Enabled reports whether o encrypts or signs.
func (o WriteOptions) Enabled() bool { return len(o.Recipients) > 0 || o.Signer != nil }

// Writer writes an archive through to a stream, encrypting it when there
// are recipients, and hashes the bytes as stored for the signature. The
// caller writes the tar, calls Close, puts the stream's file in place,
// then calls Seal with its final path. The encryption runs on the
// caller's goroutine and the hashing and writing of the stored bytes on
// another (pipeline), so Close must be called, also after an error: it
// ends that goroutine.
type Writer struct {
	o      WriteOptions
	h      hash.Hash
	pipe   *pipeline      // hashes and writes the stored bytes, whole MiBs per write(2)
	enc    io.WriteCloser // nil: plain
	closed bool
	err    error // Close's
}

// NewWriter returns a Writer that writes the archive to dst as o says.
func NewWriter(dst io.Writer, o WriteOptions) (*Writer, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	h := sha256.New()
	w := &Writer{o: o, h: h, pipe: newPipeline(dst, h)}
	if len(o.Recipients) > 0 {
		// age writes a 64 KiB chunk at a time; the pipeline gathers them
		// into whole MiBs.
		enc, err := age.Encrypt(w.pipe, o.Recipients...)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("encrypt archive: %w", err), w.pipe.Close())
		}
		w.enc = enc
	}
	return w, nil
}

// Write writes plain archive bytes.
func (w *Writer) Write(p []byte) (int, error) {
	if w.closed {
		return 0, errors.New("write to a closed archive writer")
	}
	if w.enc != nil {
		return w.enc.Write(p)
	}
	return w.pipe.Write(p)
}

// Close ends the archive: it writes the last encrypted chunk and waits
// until every byte is hashed and written. It does not close the
// underlying stream. Calling it again returns the same.
func (w *Writer) Close() error {
	if w.closed {
		return w.err
	}
	w.closed = true
	if w.enc != nil {
		if err := w.enc.Close(); err != nil {
			w.err = fmt.Errorf("encrypt archive: %w", err)
		}
	}
	if err := w.pipe.Close(); err != nil && w.err == nil {
		w.err = fmt.Errorf("write archive: %w", err)
	}
	return w.err
}

// Stored returns the bytes written to the stream so far (all of them
// once Close has returned).
func (w *Writer) Stored() int64 { return w.pipe.n }

// Encrypted reports whether the archive is encrypted.
func (w *Writer) Encrypted() bool { return w.enc != nil }

// Signature returns the signature of the closed archive, or nil without a
// Signer.
func (w *Writer) Signature() (*Signature, error) {
	if !w.closed {
		return nil, errors.New("sign an archive before it is closed")
	}
	if w.o.Signer == nil {
		return nil, nil
	}
	if w.err != nil {
		return nil, w.err
	}
	var sum [32]byte
	copy(sum[:], w.h.Sum(nil))
	return NewSignature(*w.o.Signer, sum, w.pipe.n, w.enc != nil, w.o.Now())
}

// Seal writes the signature file of the closed archive now at path,
// crash-safely (a temp file, fsync, rename, fsync of the directory), with
// mode 0600. Without a Signer it does nothing. A crash before it leaves an
// unsigned archive, which a policy refuses.
func (w *Writer) Seal(path string) error {
	s, err := w.Signature()
	if err != nil || s == nil {
		return err
	}
	if err := atomicfile.WriteFile(path+SignatureSuffix, s.Marshal(), 0o600); err != nil {
		return fmt.Errorf("sign %s: %w", path, err)
	}
	return nil
}

// SignFile signs the archive file at path, already written and in place,
// as o.Signer (doing nothing without one): it hashes the file and writes
// its signature file as Seal does. It is for archives not written through
// a Writer (nodeshim's archive built around CRIU's pages image); an
// encrypted archive is always written through one.
func SignFile(path string, o WriteOptions) error {
	if o.Signer == nil {
		return nil
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sign %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := hashPipelined(h, f)
	if err != nil {
		return fmt.Errorf("sign %s: hash: %w", path, err)
	}
	magic := make([]byte, len(ageMagic))
	m, _ := f.ReadAt(magic, 0)
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	s, err := NewSignature(*o.Signer, sum, n, m == len(magic) && string(magic) == ageMagic, o.Now())
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path+SignatureSuffix, s.Marshal(), 0o600); err != nil {
		return fmt.Errorf("sign %s: %w", path, err)
	}
	return nil
}

// RemoveSignature removes the signature file of the archive at path, if
// there is one: whoever removes an archive removes its signature with it.
func RemoveSignature(path string) error {
	if err := os.Remove(path + SignatureSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
