package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// MetaFile is one metadata member at the archive's root (config.dump,
// spec.dump, status.dump).
type MetaFile struct {
	Name string
	Data []byte
}

// NewWriter returns a Writer that appends to f from offset off (the
// file's end), calling progress, when set, with the bytes written at
// most every interval.
func NewWriter(ctx context.Context, f *os.File, off int64, progress func(written int64), every time.Duration) *Writer {
	return &Writer{ctx: ctx, f: f, off: off, synced: off, progress: progress, every: every}
}

// NewStreamWriter returns a Writer that writes the archive to w, a
// stream (an encrypting one: see package seal), copying file contents
// through user space.
func NewStreamWriter(ctx context.Context, w io.Writer, progress func(written int64), every time.Duration) *Writer {
	return &Writer{ctx: ctx, w: w, progress: progress, every: every}
}

// Offset is the bytes of the archive written so far.
func (a *Writer) Offset() int64 { return a.off }

// HeaderBytes returns the header block(s) archive/tar writes for h.
func HeaderBytes(h *tar.Header) ([]byte, error) {
	var buf bytes.Buffer
	if err := tar.NewWriter(&buf).WriteHeader(h); err != nil {
		return nil, fmt.Errorf("tar header for %s: %w", h.Name, err)
	}
	return buf.Bytes(), nil
}

// AppendMember appends a whole member, padded, to buf.
func AppendMember(buf *bytes.Buffer, h *tar.Header, data []byte) error {
	h.ModTime = h.ModTime.Truncate(time.Second)
	hb, err := HeaderBytes(h)
	if err != nil {
		return err
	}
	buf.Write(hb)
	buf.Write(data)
	if r := len(data) % BlockSize; r != 0 {
		buf.Write(make([]byte, BlockSize-r))
	}
	return nil
}

// WriteTree writes the archive's members: checkpoint/ and the CRIU images
// under it, then config.dump, spec.dump, status.dump, dump.log and stats-dump at the
// root, then the end-of-archive blocks. The images of earlier pre-dump
// rounds, when images has them, go in as checkpoint/parent/,
// checkpoint/parent/parent/ and so on (see ParentDir).
func WriteTree(aw *Writer, work, images string, meta []MetaFile) error {
	if err := writeImages(aw, images, ImagesDir, time.Now()); err != nil {
		return err
	}
	return aw.Rest(work, meta)
}

// ParentDir is the directory of an images directory that holds the images
// of the pre-dump round before it: CRIU's parent link
// (criu/image.c's CR_PARENT_LINK), which CRIU's restore opens whether it
// is a symlink or, as nodeshim archives it, a directory.
const ParentDir = "parent"

// writeImages writes the directory entry name/ and the regular files of
// dir under it, then, when dir has a ParentDir directory, that one the
// same way.
func writeImages(aw *Writer, dir, name string, now time.Time) error {
	if err := aw.Header(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o700, ModTime: now}); err != nil {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(ents))
	parent := false
	for _, e := range ents {
		switch {
		case e.Type().IsRegular():
			names = append(names, e.Name())
		case e.IsDir() && e.Name() == ParentDir:
			parent = true
		}
	}
	sort.Strings(names)
	for _, n := range names {
		if err := aw.File(filepath.Join(dir, n), name+"/"+n); err != nil {
			return err
		}
	}
	if parent {
		return writeImages(aw, filepath.Join(dir, ParentDir), name+"/"+ParentDir, now)
	}
	return nil
}

// Rest writes the members at the archive's root, the metadata files
// (config.dump, spec.dump, status.dump),
// rootfs-diff.tar and deleted.files when the work directory has them,
// dump.log and stats-dump, and the end of the archive.
func (a *Writer) Rest(work string, meta []MetaFile) error {
	now := time.Now()
	for _, m := range meta {
		if err := a.Header(&tar.Header{Typeflag: tar.TypeReg, Name: m.Name, Mode: 0o600, Size: int64(len(m.Data)), ModTime: now}); err != nil {
			return err
		}
		if err := a.WriteBytes(m.Data); err != nil {
			return err
		}
		if err := a.Pad(); err != nil {
			return err
		}
	}
	// The writable layer's changes, when the target is a container.
	for _, n := range []string{RootfsDiffTar, DeletedFiles} {
		src := filepath.Join(work, n)
		if _, err := os.Lstat(src); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := a.File(src, n); err != nil {
			return err
		}
	}
	if err := a.File(filepath.Join(work, DumpLog), DumpLog); err != nil {
		return err
	}
	// CRIU writes stats-dump to its work directory, at its end: a lazy
	// dump's archive, written while CRIU serves the memory, has none.
	if err := a.File(filepath.Join(work, StatsDump), StatsDump); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// Two zero blocks end a tar archive.
	return a.WriteBytes(make([]byte, 2*BlockSize))
}

const (
	// BlockSize is tar's block.
	BlockSize = 512
	// writebackChunk is how much archive data is written before its
	// writeback is started (sync_file_range), so that the final fsync
	// finds most of the archive on disk already.
	writebackChunk = 32 << 20
)

// Writer writes a tar stream to a file: headers through
// archive/tar, file contents with copy_file_range (one in-kernel copy, no
// trip through user space), starting writeback as it goes.
type Writer struct {
	ctx      context.Context
	f        *os.File
	w        io.Writer // instead of f, for NewStreamWriter
	off      int64
	synced   int64
	progress func(written int64)
	every    time.Duration
	last     time.Time
}

// Header writes the header block(s) of h. archive/tar writes a header as
// soon as WriteHeader is called, so the bytes it produced are the header.
func (a *Writer) Header(h *tar.Header) error {
	// Whole seconds and short names keep every header plain USTAR, which
	// any tar reads, with no PAX records.
	h.ModTime = h.ModTime.Truncate(time.Second)
	h.Uid, h.Gid = 0, 0
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(h); err != nil {
		return fmt.Errorf("tar header for %s: %w", h.Name, err)
	}
	return a.WriteBytes(buf.Bytes())
}

func (a *Writer) WriteBytes(p []byte) error {
	if err := a.ctx.Err(); err != nil {
		return err
	}
	var n int
	var err error
	if a.w != nil {
		n, err = a.w.Write(p)
	} else {
		n, err = a.f.Write(p)
	}
	a.advance(int64(n))
	return err
}

// Pad fills the current member up to a block boundary.
func (a *Writer) Pad() error {
	if r := a.off % BlockSize; r != 0 {
		return a.WriteBytes(make([]byte, BlockSize-r))
	}
	return nil
}

func (a *Writer) advance(n int64) {
	a.off += n
	if a.f != nil && a.off-a.synced >= writebackChunk {
		// Start writeback of what is written so far without waiting
		// (SYNC_FILE_RANGE_WRITE); errors surface in the final fsync.
		_ = unix.SyncFileRange(int(a.f.Fd()), a.synced, a.off-a.synced, unix.SYNC_FILE_RANGE_WRITE)
		a.synced = a.off
	}
	if a.progress != nil && time.Since(a.last) >= a.every {
		a.last = time.Now()
		a.progress(a.off)
	}
}

// File writes the regular file src as member name.
func (a *Writer) File(src, name string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	if err := a.Header(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o600, Size: fi.Size(), ModTime: fi.ModTime()}); err != nil {
		return err
	}
	if a.w != nil {
		return a.copyStream(in, src, fi.Size())
	}
	for left := fi.Size(); left > 0; {
		if err := a.ctx.Err(); err != nil {
			return err
		}
		n, err := unix.CopyFileRange(int(in.Fd()), nil, int(a.f.Fd()), nil, int(min(left, writebackChunk)), 0)
		if err != nil {
			return fmt.Errorf("copy %s: %w", src, err)
		}
		if n == 0 {
			return fmt.Errorf("copy %s: file shrank by %d bytes while it was archived", src, left)
		}
		left -= int64(n)
		a.advance(int64(n))
	}
	return a.Pad()
}

// copyStream copies size bytes of in (src) to the stream, a chunk at a
// time, checking ctx between chunks.
func (a *Writer) copyStream(in *os.File, src string, size int64) error {
	buf := make([]byte, 1<<20)
	for left := size; left > 0; {
		if err := a.ctx.Err(); err != nil {
			return err
		}
		n, err := io.ReadFull(in, buf[:min(left, int64(len(buf)))])
		if n > 0 {
			if werr := a.WriteBytes(buf[:n]); werr != nil {
				return werr
			}
			left -= int64(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("copy %s: file shrank by %d bytes while it was archived", src, left)
		}
		if err != nil {
			return fmt.Errorf("copy %s: %w", src, err)
		}
	}
	return a.Pad()
}
