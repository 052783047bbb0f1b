package archive

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// FreeBytes returns the bytes an unprivileged writer may still use on
// the filesystem of f (statfs's f_bavail blocks of f_bsize).
func FreeBytes(f *os.File) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", f.Name(), err)
	}
	free := uint64(st.Bavail) * uint64(st.Bsize)
	if free > 1<<62 {
		free = 1 << 62
	}
	return int64(free), nil
}

// rootFree returns the free bytes of the filesystem that holds root.
func rootFree(root *os.Root) (int64, error) {
	d, err := root.Open(".")
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", root.Name(), err)
	}
	defer d.Close()
	return FreeBytes(d)
}

// Unpack extracts a checkpoint archive into dir, within l and the free
// space of dir's filesystem. Every name is resolved through an os.Root at
// dir, so that no entry, nor a symlink an entry passes through, can write
// outside dir. It checks each entry again as it goes (ValidateLimits
// does the same on the whole archive first) and, once all are written,
// follows every symlink through the others: one that leads outside dir is
// refused. On any error it removes everything it wrote, so dir is left
// as it was.
func Unpack(r io.Reader, dir string, l Limits) (err error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer root.Close()
	free, err := rootFree(root)
	if err != nil {
		return err
	}
	u := &unpacker{root: root, dir: dir, sz: newSizer(l, free, dir), t: newTree()}
	defer func() {
		if err != nil {
			err = errors.Join(err, u.undo())
		}
	}()
	tr := tar.NewReader(r)
	var buf []byte // grown to the largest member, up to 4 MiB
	for n := 0; ; n++ {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: read tar: %w", ErrInvalid, err)
		}
		if n >= maxEntries {
			return fmt.Errorf("%w: more than %d entries", ErrInvalid, maxEntries)
		}
		if h.Typeflag == tar.TypeReg && int64(len(buf)) < min(h.Size, 4<<20) {
			buf = make([]byte, min(h.Size, 4<<20))
		}
		if err := u.entry(h, tr, buf); err != nil {
			return err
		}
	}
	return u.t.checkLinks()
}

// unpacker writes an archive's entries under root and remembers what it
// created, to remove it again on failure.
type unpacker struct {
	root    *os.Root
	dir     string
	sz      *sizer
	t       *tree
	created []string // in creation order; parents before children
}

func (u *unpacker) entry(h *tar.Header, r io.Reader, buf []byte) error {
	name, err := cleanEntryName(h.Name)
	if err != nil {
		return err
	}
	switch h.Typeflag {
	case tar.TypeDir, tar.TypeReg:
	case tar.TypeSymlink:
		if err := checkSymlink(name, h.Linkname); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: entry %q has type %q", ErrInvalid, h.Name, h.Typeflag)
	}
	if err := u.t.add(h.Name, name, h.Typeflag, h.Linkname); err != nil {
		return err
	}
	if h.Typeflag == tar.TypeReg {
		// Before anything of it is written.
		if err := u.sz.add(h.Name, h); err != nil {
			return err
		}
	}
	if err := u.mkdirAll(path.Dir(name)); err != nil {
		return err
	}
	switch h.Typeflag {
	case tar.TypeDir:
		if err := u.root.Mkdir(name, 0o700); err == nil {
			u.created = append(u.created, name)
		} else if !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create %s in %s: %w", name, u.dir, err)
		}
	case tar.TypeReg:
		out, err := u.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return fmt.Errorf("create %s in %s: %w", name, u.dir, err)
		}
		u.created = append(u.created, name)
		// The reader hidden behind a plain io.Reader: tar's WriteTo
		// would seek over a sparse member's holes, and the size counted
		// is the size written.
		var n int64
		var cerr error
		if h.Size > 0 {
			n, cerr = io.CopyBuffer(out, io.LimitReader(archiveReader{r}, h.Size), buf)
		}
		if err := errors.Join(cerr, out.Close()); err != nil {
			return fmt.Errorf("write %s in %s: %w", name, u.dir, err)
		}
		if n != h.Size {
			return fmt.Errorf("%w: entry %q ends after %d of %d bytes", ErrInvalid, h.Name, n, h.Size)
		}
	case tar.TypeSymlink:
		if err := u.root.Symlink(h.Linkname, name); err != nil {
			return fmt.Errorf("symlink %s in %s: %w", name, u.dir, err)
		}
		u.created = append(u.created, name)
	}
	return nil
}

// archiveReader marks the errors of reading the archive as ErrInvalid
// (a truncated or corrupt member), apart from those of writing it out.
type archiveReader struct{ r io.Reader }

func (a archiveReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("%w: read tar: %w", ErrInvalid, err)
	}
	return n, err
}

// mkdirAll makes d and its missing parents, recording each one made.
func (u *unpacker) mkdirAll(d string) error {
	if d == "." {
		return nil
	}
	if err := u.mkdirAll(path.Dir(d)); err != nil {
		return err
	}
	err := u.root.Mkdir(d, 0o700)
	switch {
	case err == nil:
		u.created = append(u.created, d)
	case errors.Is(err, fs.ErrExist):
		fi, serr := u.root.Lstat(d)
		if serr != nil || !fi.IsDir() {
			return fmt.Errorf("%w: %s in %s is not a directory", ErrInvalid, d, u.dir)
		}
	default:
		return fmt.Errorf("create %s in %s: %w", d, u.dir, err)
	}
	return nil
}

// undo removes what the unpacker created, children before parents.
func (u *unpacker) undo() error {
	var errs []error
	for i := len(u.created) - 1; i >= 0; i-- {
		if err := u.root.RemoveAll(u.created[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove %s from %s: %w", u.created[i], u.dir, err))
		}
	}
	return errors.Join(errs...)
}

// OpenMember opens the regular file name of an unpacked archive through
// root, for reading: every symlink on the way is resolved beneath root
// (os.Root), and anything but a regular file of at most max bytes (a
// device, a FIFO, a directory) is refused, naming the member.
func OpenMember(root *os.Root, name string, max int64) (*os.File, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: open %s in %s: %w", ErrInvalid, name, root.Name(), err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s in %s: %w", name, root.Name(), err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w: %s in %s is a %s, not a regular file", ErrInvalid, name, root.Name(), fi.Mode().Type())
	}
	if fi.Size() > max {
		f.Close()
		return nil, fmt.Errorf("%w: %s in %s has %d bytes, more than %d", ErrTooLarge, name, root.Name(), fi.Size(), max)
	}
	return f, nil
}
