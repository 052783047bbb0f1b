package cgroup

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// cname is a file name relative to a cgroup directory, NUL-terminated once
// so that opening it with openat(2) does not allocate.
type cname struct {
	s string
	z []byte
	// k is the file's slot in a kept cgroup, -1 for a file that is never
	// kept open.
	k int8
}

func newCname(s string) cname { return cname{s: s, z: append([]byte(s), 0), k: -1} }

func keptCname(s string, k int8) cname { return cname{s: s, z: append([]byte(s), 0), k: k} }

// openDir opens a cgroup directory for openat(2).
func openDir(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, classify(dir, err)
	}
	return fd, nil
}

// readAt reads the whole file name under dirfd into *buf (grown as needed)
// and returns the bytes read. dir is used for error messages only.
func readAt(dirfd int, dir string, name cname, buf *[]byte) ([]byte, error) {
	fd, err := openAt(dirfd, name)
	if err != nil {
		return nil, classifyAt(dir, name.s, err)
	}
	defer unix.Close(fd)
	data, err := preadAll(fd, buf)
	if err != nil {
		return nil, classifyAt(dir, name.s, err)
	}
	return data, nil
}

// classify turns the error of opening a cgroup directory into ErrVanished
// when the directory is gone.
func classify(dir string, err error) error {
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("open %s: %w (%w)", dir, ErrVanished, err)
	}
	return fmt.Errorf("open %s: %w", dir, err)
}

// classifyAt tells a file missing from a live cgroup (ErrMissing: the
// controller is not enabled there, or the file does not exist at the root)
// from a cgroup removed while it was being read (ErrVanished). kernfs returns
// ENODEV for reads of a file whose cgroup was removed after open
// (fs/kernfs/file.c, kernfs_get_active failing), and ENOENT for an openat
// under a removed directory.
func classifyAt(dir, name string, err error) error {
	errno, _ := err.(unix.Errno)
	switch errno {
	case unix.ENODEV:
		return &fileError{dir: dir, name: name, class: ErrVanished, errno: errno}
	case unix.ENOENT:
		var st unix.Stat_t
		// A removed cgroup directory's path no longer resolves.
		if serr := unix.Stat(dir, &st); serr != nil {
			return &fileError{dir: dir, name: name, class: ErrVanished, errno: errno}
		}
		return &fileError{dir: dir, name: name, class: ErrMissing, errno: errno}
	}
	return fmt.Errorf("read %s/%s: %w", dir, name, err)
}

// fileError is the error of one cgroup file that is missing or gone. Its
// message is built only when asked for: a pass over many cgroups with a
// controller missing everywhere would otherwise format thousands of them.
type fileError struct {
	dir, name string
	class     error
	errno     unix.Errno
}

func (e *fileError) Error() string {
	return "read " + e.dir + "/" + e.name + ": " + e.class.Error() + " (" + e.errno.Error() + ")"
}

// Unwrap returns the class (ErrMissing or ErrVanished) and the errno.
func (e *fileError) Unwrap() []error { return []error{e.class, e.errno} }

func closeFd(fd int) { _ = unix.Close(fd) }
