package archive

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"
)

// Layer is an overlay writable layer: the upper directory that holds the
// container's changes and the lower directories (the image) under it.
type Layer struct {
	Upper string
	Lower []string
}

// overlayOpaque is the xattr overlayfs sets on a directory that hides the
// lower directories' contents (Documentation/filesystems/overlayfs.rst).
const overlayOpaque = "trusted.overlay.opaque"

// WriteRootfsDiff writes the changes recorded in layer's upper directory
// into dir: rootfs-diff.tar with every directory, regular file, symlink and
// device node of the upper directory, and, when the container deleted
// anything, deleted.files with each whiteout's path and, for a directory
// that was removed and made again (opaque), each name of the lower layers
// it now hides. Runtimes restore by extracting the tar over a fresh root
// and then removing the deleted paths (podman's CRApplyRootFsDiffTar and
// CRRemoveDeletedFiles). Both files are created O_EXCL with mode 0600.
//
// The container runs on while its layer is read (CRIU leaves it running),
// so a file it rewrites (truncates, then writes) can shrink under the
// copy: the diff is then written again from the start, up to
// rootfsDiffAttempts times, rather than carrying a torn file or failing
// the checkpoint on the first such write.
func WriteRootfsDiff(ctx context.Context, layer Layer, dir string) error {
	for attempt := 1; ; attempt++ {
		err := writeRootfsDiff(ctx, layer, dir)
		if err == nil || !errors.Is(err, errShrank) || attempt == rootfsDiffAttempts {
			return err
		}
		for _, n := range []string{RootfsDiffTar, DeletedFiles} {
			if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
}

// rootfsDiffAttempts bounds how often WriteRootfsDiff starts again.
const rootfsDiffAttempts = 3

// errShrank says a file of the layer shrank while it was copied.
var errShrank = errors.New("file shrank while it was archived")

func writeRootfsDiff(ctx context.Context, layer Layer, dir string) (err error) {
	tarPath := filepath.Join(dir, RootfsDiffTar)
	f, err := os.OpenFile(tarPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", tarPath, err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close %s: %w", tarPath, cerr)
		}
	}()
	tw := tar.NewWriter(f)
	var deleted []string
	walkErr := filepath.WalkDir(layer.Upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(layer.Upper, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, _ := fi.Sys().(*unix.Stat_t)
		if st == nil {
			var s unix.Stat_t
			if err := unix.Lstat(p, &s); err != nil {
				return fmt.Errorf("lstat %s: %w", p, err)
			}
			st = &s
		}
		abs := "/" + filepath.ToSlash(rel)
		mode := fi.Mode()
		if mode&fs.ModeCharDevice != 0 && st.Rdev == 0 {
			// A whiteout: the name was deleted from the image.
			deleted = append(deleted, abs)
			return nil
		}
		if mode&fs.ModeSocket != 0 {
			// A socket is recreated by whoever binds it; tar cannot carry it.
			return nil
		}
		var link string
		if mode&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return fmt.Errorf("readlink %s: %w", p, err)
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return fmt.Errorf("tar header for %s: %w", p, err)
		}
		h.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			h.Name += "/"
		}
		h.Uname, h.Gname = "", ""
		h.Uid, h.Gid = int(st.Uid), int(st.Gid)
		if d.IsDir() && isOpaque(p) {
			hidden, err := hiddenByOpaque(layer, rel)
			if err != nil {
				return err
			}
			deleted = append(deleted, hidden...)
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("tar header for %s: %w", p, err)
		}
		if h.Typeflag == tar.TypeReg && h.Size > 0 {
			return copyInto(tw, p, h.Size)
		}
		return nil
	})
	if walkErr != nil {
		return fmt.Errorf("rootfs diff of %s: %w", layer.Upper, walkErr)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write %s: %w", tarPath, err)
	}
	if len(deleted) == 0 {
		return nil
	}
	return WriteJSON(filepath.Join(dir, DeletedFiles), deleted)
}

// copyInto copies size bytes of the file p into tw; a file that changed
// size meanwhile is an error rather than a corrupt member.
func copyInto(tw *tar.Writer, p string, size int64) error {
	in, err := os.Open(p)
	if err != nil {
		return err
	}
	defer in.Close()
	n, err := io.Copy(tw, io.LimitReader(in, size))
	if err != nil {
		return fmt.Errorf("copy %s: %w", p, err)
	}
	if n != size {
		return fmt.Errorf("copy %s: %w (from %d to %d bytes)", p, errShrank, size, n)
	}
	return nil
}

func isOpaque(p string) bool {
	buf := make([]byte, 8)
	n, err := unix.Lgetxattr(p, overlayOpaque, buf)
	return err == nil && n == 1 && buf[0] == 'y'
}

// hiddenByOpaque lists the names in the lower layers' rel that an opaque
// upper directory hides, as absolute container paths.
func hiddenByOpaque(layer Layer, rel string) ([]string, error) {
	upper := map[string]bool{}
	ents, err := os.ReadDir(filepath.Join(layer.Upper, rel))
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		upper[e.Name()] = true
	}
	seen := map[string]bool{}
	var out []string
	for _, l := range layer.Lower {
		ents, err := os.ReadDir(filepath.Join(l, rel))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			if n := e.Name(); !upper[n] && !seen[n] {
				seen[n] = true
				out = append(out, "/"+filepath.ToSlash(filepath.Join(rel, n)))
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// WriteJSON writes v as JSON to a new file p (never over an existing one),
// mode 0600 from the first byte: an archive member such as deleted.files or
// descriptors.json, written into a checkpoint's work directory.
func WriteJSON(p string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", p, err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", p, err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", p, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", p, err)
	}
	return nil
}
