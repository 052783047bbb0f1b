package archive

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ApplyRootfsDiff applies the writable-layer members of an unpacked
// archive in dir to a fresh container root rootfs, as podman and CRI-O do
// on restore: rootfs-diff.tar is extracted over rootfs (directories,
// regular files, symlinks and device nodes, with their modes and owners),
// then every path in deleted.files is removed. Both members are opened
// through an os.Root at dir, and must be regular files there: a member
// that is a symlink leading out of dir, or to a device, is refused. Each
// name in them is resolved through an os.Root at rootfs, so no member nor
// symlink in the root can make it write outside. Before anything is
// written, the sizes rootfs-diff.tar claims are added up against l and
// the free space of rootfs's filesystem. A dir without either file
// changes nothing.
func ApplyRootfsDiff(dir, rootfs string, l Limits) error {
	src, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer src.Close()
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return fmt.Errorf("open %s: %w", rootfs, err)
	}
	defer root.Close()
	tarPath := filepath.Join(dir, RootfsDiffTar)
	f, err := OpenMember(src, RootfsDiffTar, 1<<62)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	default:
		err := applyDiff(root, f, l)
		f.Close()
		if err != nil {
			return fmt.Errorf("apply %s to %s: %w", tarPath, rootfs, err)
		}
	}
	delPath := filepath.Join(dir, DeletedFiles)
	df, err := OpenMember(src, DeletedFiles, MaxMetaSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	b, err := io.ReadAll(io.LimitReader(df, MaxMetaSize))
	df.Close()
	if err != nil {
		return fmt.Errorf("read %s: %w", delPath, err)
	}
	var deleted []string
	if err := json.Unmarshal(b, &deleted); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalid, delPath, err)
	}
	for _, p := range deleted {
		name, err := cleanEntryName(strings.TrimPrefix(p, "/"))
		if err != nil {
			return fmt.Errorf("%s: %w", delPath, err)
		}
		if err := root.RemoveAll(name); err != nil {
			return fmt.Errorf("remove %s from %s: %w", p, rootfs, err)
		}
	}
	return nil
}

// applyDiff adds up the sizes the tar in f claims, then extracts it.
func applyDiff(root *os.Root, f *os.File, l Limits) error {
	free, err := rootFree(root)
	if err != nil {
		return err
	}
	sz := newSizer(l, free, root.Name())
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: read tar: %w", ErrInvalid, err)
		}
		if h.Typeflag == tar.TypeReg || isSparse(h) {
			if err := sz.add(h.Name, h); err != nil {
				return err
			}
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("seek %s: %w", f.Name(), err)
	}
	return extractDiff(root, f)
}

func extractDiff(root *os.Root, r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: read tar: %w", ErrInvalid, err)
		}
		name, err := cleanEntryName(h.Name)
		if err != nil {
			return err
		}
		mode := os.FileMode(h.Mode).Perm()
		if h.Mode&0o4000 != 0 {
			mode |= os.ModeSetuid
		}
		if h.Mode&0o2000 != 0 {
			mode |= os.ModeSetgid
		}
		if h.Mode&0o1000 != 0 {
			mode |= os.ModeSticky
		}
		if d := filepath.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("create %s: %w", d, err)
			}
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("create %s: %w", name, err)
			}
		case tar.TypeReg:
			if err := root.RemoveAll(name); err != nil {
				return fmt.Errorf("replace %s: %w", name, err)
			}
			out, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
			if err != nil {
				return fmt.Errorf("create %s: %w", name, err)
			}
			// Sparse members were counted at their full size; tar's
			// WriteTo writes their holes as holes.
			_, cerr := io.Copy(out, tr)
			if err := errors.Join(cerr, out.Close()); err != nil {
				return fmt.Errorf("write %s: %w", name, err)
			}
		case tar.TypeSymlink:
			if err := root.RemoveAll(name); err != nil {
				return fmt.Errorf("replace %s: %w", name, err)
			}
			// The link is made inside the root; what it points to is
			// resolved by the container, inside its own root.
			if err := root.Symlink(h.Linkname, name); err != nil {
				return fmt.Errorf("symlink %s: %w", name, err)
			}
			if err := root.Lchown(name, h.Uid, h.Gid); err != nil {
				return fmt.Errorf("chown %s: %w", name, err)
			}
			continue
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			if err := mknodIn(root, name, h); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: entry %q has type %q", ErrInvalid, h.Name, h.Typeflag)
		}
		if err := root.Lchown(name, h.Uid, h.Gid); err != nil {
			return fmt.Errorf("chown %s: %w", name, err)
		}
		// After chown, which clears set-id bits.
		if err := root.Chmod(name, mode); err != nil {
			return fmt.Errorf("chmod %s: %w", name, err)
		}
	}
}

// mknodIn makes the device node or FIFO of h at name, through a directory
// fd opened in root so the parent cannot be a symlink out of it.
func mknodIn(root *os.Root, name string, h *tar.Header) error {
	if err := root.RemoveAll(name); err != nil {
		return fmt.Errorf("replace %s: %w", name, err)
	}
	parent, err := root.Open(filepath.Dir(name))
	if err != nil {
		return fmt.Errorf("open %s: %w", filepath.Dir(name), err)
	}
	defer parent.Close()
	mode := uint32(h.Mode & 0o7777)
	switch h.Typeflag {
	case tar.TypeChar:
		mode |= unix.S_IFCHR
	case tar.TypeBlock:
		mode |= unix.S_IFBLK
	default:
		mode |= unix.S_IFIFO
	}
	dev := unix.Mkdev(uint32(h.Devmajor), uint32(h.Devminor))
	if err := unix.Mknodat(int(parent.Fd()), filepath.Base(name), mode, int(dev)); err != nil {
		return fmt.Errorf("mknod %s: %w", name, err)
	}
	return nil
}
