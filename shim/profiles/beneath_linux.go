package profiles

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/kernel/seccomp"
)

// ErrSymlink is wrapped when a path below the seccomp root is a symbolic
// link: nodeshim never writes, reads or removes through one, whatever it
// points at. Anything that can create files in the root (a pod with a
// hostPath of it) could otherwise make nodeshim, which runs as root, write
// a profile over any file on the host.
var ErrSymlink = errors.New("is a symbolic link; nodeshim does not follow symbolic links below the seccomp root")

// ErrNotDir is wrapped when a directory of a profile's name exists below
// the seccomp root as something else.
var ErrNotDir = errors.New("is not a directory")

// beneath is how every path below a root is resolved: openat2(2) (Linux
// 5.6) with RESOLVE_BENEATH and RESOLVE_NO_SYMLINKS, which fails with
// ELOOP on a symbolic link in any component, the last one included, and
// with EXDEV on a path that would leave the root.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// root is a seccomp root opened once; every file of a profile is reached
// from its descriptor, one path component at a time, without following a
// symbolic link. The root's own path is resolved as given (symbolic links
// in it are followed, as kubelet follows them: a kubelet root dir may be
// a link to a larger disk); only what is below it is not.
type root struct {
	path string
	fd   int
}

// openRoot opens the directory path; with create, it is created first
// (with its parents, mode 0755) when it does not exist. A root that does
// not exist is (nil, nil) without create.
func openRoot(dir string, create bool) (*root, error) {
	if create {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create seccomp root %s: %w", dir, err)
		}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) && !create {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open seccomp root %s: %w", dir, err)
	}
	return &root{path: dir, fd: fd}, nil
}

func (r *root) close() { unix.Close(r.fd) }

// full is the path of name (slash-separated, relative to the root) as the
// messages give it.
func (r *root) full(name string) string { return filepath.Join(r.path, filepath.FromSlash(name)) }

// resolveErr turns openat2's errors into ones that name the path: the
// first component of name that is a symbolic link (ELOOP, or ENOTDIR when
// O_DIRECTORY met the link) or not a directory.
func (r *root) resolveErr(op, name string, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		if _, cerr := r.check(name); cerr != nil {
			return fmt.Errorf("%s %s: %w", op, r.full(name), cerr)
		}
	}
	return fmt.Errorf("%s %s: %w", op, r.full(name), err)
}

// openat opens name below the root with flags, refusing a symbolic link
// in any component.
func (r *root) openat(name string, flags uint64, mode uint32) (int, error) {
	for {
		fd, err := unix.Openat2(r.fd, name, &unix.OpenHow{Flags: flags | unix.O_CLOEXEC | unix.O_NOFOLLOW, Mode: uint64(mode), Resolve: beneath})
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue // EAGAIN: a rename raced the lookup (RESOLVE_BENEATH)
		}
		return fd, err
	}
}

// dir opens the directory dir (slash-separated, "" or "." for the root),
// creating each missing component with mode 0755 when create is set. It
// fails with ErrSymlink or ErrNotDir naming the first component in the way.
func (r *root) dir(dir string, create bool) (int, error) {
	if dir == "" || dir == "." {
		fd, err := unix.Dup(r.fd)
		if err != nil {
			return -1, fmt.Errorf("dup %s: %w", r.path, err)
		}
		unix.CloseOnExec(fd)
		return fd, nil
	}
	if !create {
		fd, err := r.openat(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return -1, r.resolveErr("open", dir, err)
		}
		return fd, nil
	}
	parts := strings.Split(dir, "/")
	for i := range parts {
		sub := strings.Join(parts[:i+1], "/")
		fd, err := r.openat(sub, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if errors.Is(err, unix.ENOENT) {
			parent, perr := r.dir(path.Dir(sub), false)
			if perr != nil {
				return -1, perr
			}
			err = unix.Mkdirat(parent, parts[i], 0o755)
			unix.Close(parent)
			if err != nil && !errors.Is(err, unix.EEXIST) {
				return -1, r.resolveErr("create directory", sub, err)
			}
			fd, err = r.openat(sub, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		}
		if err != nil {
			return -1, r.resolveErr("open", sub, err)
		}
		if i == len(parts)-1 {
			return fd, nil
		}
		unix.Close(fd)
	}
	panic("unreachable")
}

// check reports whether name exists below the root, without following a
// symbolic link: a symbolic link as any component of it, the last one
// included, is ErrSymlink naming it; a component that is not a directory,
// ErrNotDir.
func (r *root) check(name string) (bool, error) {
	parts := strings.Split(name, "/")
	for i := range parts {
		sub := strings.Join(parts[:i+1], "/")
		var st unix.Stat_t
		err := unix.Fstatat(r.fd, sub, &st, unix.AT_SYMLINK_NOFOLLOW)
		switch {
		case errors.Is(err, unix.ENOENT):
			return false, nil
		case errors.Is(err, unix.ENOTDIR):
			return false, fmt.Errorf("%s: %w", r.full(path.Dir(sub)), ErrNotDir)
		case err != nil:
			return false, fmt.Errorf("stat %s: %w", r.full(sub), err)
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			return false, fmt.Errorf("%s: %w", r.full(sub), ErrSymlink)
		}
	}
	return true, nil
}

// stagedName is where name is staged before it is renamed into place: a
// hidden name beside it, which no profile name can have.
func stagedName(name string) string {
	return path.Join(path.Dir(name), "."+path.Base(name)+".nodeshim-staged")
}

// stage writes data to name's staged file, created new (O_EXCL) with mode
// 0644 below directories created as needed, and fsyncs it. A staged file
// left by an interrupted Apply is replaced.
func (r *root) stage(name string, data []byte) error {
	d, err := r.dir(path.Dir(name), true)
	if err != nil {
		return err
	}
	defer unix.Close(d)
	staged := path.Base(stagedName(name))
	if err := unix.Unlinkat(d, staged, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %s: %w", r.full(stagedName(name)), err)
	}
	fd, err := unix.Openat(d, staged, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return r.resolveErr("create", stagedName(name), err)
	}
	f := os.NewFile(uintptr(fd), r.full(stagedName(name)))
	// Profiles are not secret, and the runtime may read them as another
	// user: 0644 whatever the umask, before any byte is written.
	err = f.Chmod(0o644)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		unix.Unlinkat(d, staged, 0)
		return fmt.Errorf("write %s: %w", r.full(stagedName(name)), err)
	}
	return nil
}

// commit renames name's staged file over name and fsyncs the directory.
// rename(2) replaces the last component itself, never what a symbolic
// link there points at.
func (r *root) commit(name string) error {
	d, err := r.dir(path.Dir(name), false)
	if err != nil {
		return err
	}
	defer unix.Close(d)
	if err := unix.Renameat(d, path.Base(stagedName(name)), d, path.Base(name)); err != nil {
		return fmt.Errorf("rename %s to %s: %w", r.full(stagedName(name)), r.full(name), err)
	}
	if err := unix.Fsync(d); err != nil {
		return fmt.Errorf("fsync %s: %w", r.full(path.Dir(name)), err)
	}
	return nil
}

// unstage removes name's staged file and the temporary files an older
// nodeshim staged it with (atomicfile's ".NAME.tmp-*"), if any.
func (r *root) unstage(name string) {
	d, err := r.dir(path.Dir(name), false)
	if err != nil {
		return
	}
	defer unix.Close(d)
	staged := path.Base(stagedName(name))
	unix.Unlinkat(d, staged, 0)
	dup, err := unix.Dup(d)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(dup), r.full(path.Dir(name)))
	defer f.Close()
	names, _ := f.Readdirnames(-1)
	for _, n := range names {
		if strings.HasPrefix(n, "."+staged+".tmp-") {
			unix.Unlinkat(d, n, 0)
		}
	}
}

// hash is the hash of the regular file name, "" when there is none, it is
// something else, it cannot be read or a symbolic link is on the way.
func (r *root) hash(name string) string {
	data, err := r.read(name)
	if err != nil {
		return ""
	}
	return Hash(data)
}

// read reads the regular file name below the root, without following a
// symbolic link; a FIFO or other non-regular file is an error.
func (r *root) read(name string) ([]byte, error) {
	// O_NONBLOCK: a FIFO put there must not block the open.
	fd, err := r.openat(name, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, r.resolveErr("open", name, err)
	}
	f := os.NewFile(uintptr(fd), r.full(name))
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", r.full(name), err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w: not a regular file", r.full(name), errdefs.ErrInvalidArgument)
	}
	data, err := io.ReadAll(io.LimitReader(f, seccomp.MaxProfileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", r.full(name), err)
	}
	return data, nil
}

// remove removes the file name (never what a symbolic link there points
// at: unlinkat(2) removes the link) and fsyncs its directory.
func (r *root) remove(name string) error {
	d, err := r.dir(path.Dir(name), false)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(d)
	if err := unix.Unlinkat(d, path.Base(name), 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %s: %w", r.full(name), err)
	}
	if err := unix.Fsync(d); err != nil {
		return fmt.Errorf("fsync %s: %w", r.full(path.Dir(name)), err)
	}
	return nil
}

// rootOf is the seccomp root an installed profile was written under: its
// path without its name (parseManifest checks that it ends in it).
func rootOf(p Installed) string {
	return strings.TrimSuffix(p.Path, "/"+p.Name)
}

// hashInstalled is the hash of the file of an installed profile, read
// below its own root; "" when there is none.
func hashInstalled(p Installed) string {
	r, err := openRoot(rootOf(p), false)
	if err != nil || r == nil {
		return ""
	}
	defer r.close()
	return r.hash(p.Name)
}
