package seal

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"filippo.io/age"
	"go.uber.org/goleak"
)

// TestPipeline: what a pipeline writes reaches dst whole and in order,
// and is hashed, for writes of any size and through ReadFrom; an error
// of dst comes back from the next writes and from Close, which returns
// (a block handed over as the worker failed was once handed over again:
// the worker then waited forever to give back one block too many).
func TestPipeline(t *testing.T) {
	data := make([]byte, 3*ioChunk+12345)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(data)
	for _, size := range []int{7, 64 << 10, ioChunk, ioChunk + 1, len(data)} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			var dst bytes.Buffer
			h := sha256.New()
			p := newPipeline(&dst, h)
			for b := data; len(b) > 0; {
				n := min(size, len(b))
				if m, err := p.Write(b[:n]); err != nil || m != n {
					t.Fatalf("Write = %d, %v", m, err)
				}
				b = b[n:]
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dst.Bytes(), data) || !bytes.Equal(h.Sum(nil), want[:]) || p.n != int64(len(data)) {
				t.Errorf("dst %d bytes, hash match %v, counted %d", dst.Len(), bytes.Equal(h.Sum(nil), want[:]), p.n)
			}
		})
	}
	h := sha256.New()
	if n, err := hashPipelined(h, bytes.NewReader(data)); err != nil || n != int64(len(data)) || !bytes.Equal(h.Sum(nil), want[:]) {
		t.Errorf("hashPipelined = %d, %v", n, err)
	}
	boom := errors.New("disk full")
	p := newPipeline(&failAfter{n: 2 * ioChunk, err: boom}, sha256.New())
	var err error
	for i := 0; i < 10 && err == nil; i++ {
		_, err = p.Write(data[:ioChunk])
	}
	if !errors.Is(err, boom) {
		t.Errorf("writes after dst failed: %v", err)
	}
	if err := p.Close(); !errors.Is(err, boom) {
		t.Errorf("Close: %v", err)
	}
}

// failAfter fails every write once n bytes were written.
type failAfter struct {
	n   int
	err error
}

func (f *failAfter) Write(b []byte) (int, error) {
	if f.n <= 0 {
		return 0, f.err
	}
	f.n -= len(b)
	return len(b), nil
}

// sequentialWriter is the way archives were sealed before the pipeline,
// kept as the benchmarks' reference: age's encryption, the hash and the
// writes in turn on one goroutine.
type sequentialWriter struct {
	h   hash.Hash
	buf *bufio.Writer
	enc io.WriteCloser
}

type hashingWriter struct {
	dst io.Writer
	h   hash.Hash
}

func (s hashingWriter) Write(p []byte) (int, error) {
	n, err := s.dst.Write(p)
	s.h.Write(p[:n])
	return n, err
}

func newSequentialWriter(dst io.Writer, recipients []age.Recipient) (*sequentialWriter, io.Writer, error) {
	w := &sequentialWriter{h: sha256.New(), buf: bufio.NewWriterSize(dst, ioChunk)}
	stored := hashingWriter{dst: w.buf, h: w.h}
	if len(recipients) == 0 {
		return w, stored, nil
	}
	enc, err := age.Encrypt(stored, recipients...)
	w.enc = enc
	return w, enc, err
}

func (w *sequentialWriter) close() error {
	if w.enc != nil {
		if err := w.enc.Close(); err != nil {
			return err
		}
	}
	return w.buf.Flush()
}

// BenchmarkSealStream seals 256 MiB of incompressible data into a file
// in /dev/shm (a tmpfs; the temp dir without one), encrypted and signed or signed only, the way
// before the pipeline (sequential: encryption, hash and writes in turn)
// and through Writer (pipelined: the hash and the writes on a second
// goroutine), side by side; and hashes the file as Open verifies it,
// reading and hashing in turn or pipelined.
func BenchmarkSealStream(b *testing.B) {
	const size = 256 << 20
	data := make([]byte, 4<<20)
	if _, err := rand.Read(data); err != nil {
		b.Fatal(err)
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		b.Fatal(err)
	}
	// In memory, so that the disk's writeback, which this machine's
	// other tenants share, does not set the pace: the passes' CPU does.
	dir := b.TempDir()
	if mem, err := InMemory("/dev/shm"); err == nil && mem {
		if dir, err = os.MkdirTemp("/dev/shm", "nodeshim-bench-"); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
	}
	write := func(b *testing.B, name string, w io.Writer, closeFn func() error) {
		for off := 0; off < size; off += len(data) {
			if _, err := w.Write(data); err != nil {
				b.Fatal(err)
			}
		}
		if err := closeFn(); err != nil {
			b.Fatal(err)
		}
	}
	for _, enc := range []struct {
		name       string
		recipients []age.Recipient
	}{{"encrypted", []age.Recipient{id.Recipient()}}, {"signed", nil}} {
		for _, way := range []string{"sequential", "pipelined"} {
			b.Run(enc.name+"/"+way, func(b *testing.B) {
				b.SetBytes(size)
				b.ReportAllocs()
				for b.Loop() {
					f, err := os.Create(filepath.Join(dir, "archive"))
					if err != nil {
						b.Fatal(err)
					}
					if way == "sequential" {
						sw, w, err := newSequentialWriter(f, enc.recipients)
						if err != nil {
							b.Fatal(err)
						}
						write(b, way, w, sw.close)
					} else {
						w, err := NewWriter(f, WriteOptions{Recipients: enc.recipients})
						if err != nil {
							b.Fatal(err)
						}
						write(b, way, w, w.Close)
					}
					f.Close()
				}
			})
		}
	}
	path := filepath.Join(dir, "archive")
	for _, way := range []string{"sequential", "pipelined"} {
		b.Run("verify/"+way, func(b *testing.B) {
			f, err := os.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			fi, _ := f.Stat()
			b.SetBytes(fi.Size())
			b.ReportAllocs()
			for b.Loop() {
				h := sha256.New()
				r := io.NewSectionReader(f, 0, fi.Size())
				if way == "sequential" {
					_, err = io.CopyBuffer(h, r, make([]byte, ioChunk))
				} else {
					_, err = hashPipelined(h, r)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
