package cgroup

import (
	"bytes"
	"errors"
	"unsafe"

	"golang.org/x/sys/unix"
)

// KeepOptions configures a Reader made by NewKeepReader.
type KeepOptions struct {
	// MaxFiles bounds the file descriptors the Reader keeps open; a cgroup
	// that does not fit is read by opening its files, as NewReader's
	// Reader does. Zero means DefaultMaxKeptFiles or three quarters of
	// RLIMIT_NOFILE's soft limit, whichever is lower.
	MaxFiles int
}

// KeepStats says what a Reader keeps open.
type KeepStats struct {
	// Groups and Files are the cgroups and the descriptors kept open;
	// MaxFiles is the bound on Files.
	Groups, Files, MaxFiles int
}

// DefaultMaxKeptFiles bounds the files a Reader keeps open when KeepOptions
// sets no bound. Each kept cgroup file holds 4.4-5.1 KiB of kernel memory
// charged to the reader's memory cgroup (measured on 6.18), so the bound
// keeps that under about 30 MiB, within the DaemonSet's memory limit, on a
// node with any number of pods: 6,144 files are every file of about 1,200
// pods; the cgroups past the bound are read by opening their files.
const DefaultMaxKeptFiles = 6144

// keeper holds the cgroups whose files a Reader keeps open between passes.
type keeper struct {
	groups   map[string]*keptGroup
	pass     uint64
	files    int
	maxFiles int
	ctrlBuf  []byte
}

// keptGroup is one cgroup's open files.
type keptGroup struct {
	// fds holds each file's descriptor by cname.k, -1 when not open.
	fds [nKept]int32
	// missing holds the error of each file found missing from the live
	// cgroup. It stays valid while cgroup.controllers reads ctrlSeen: a
	// controller's files appear and disappear with its name there
	// (kernel/cgroup/cgroup.c, cgroup_apply_control), and the files that
	// are never at the root never appear there.
	missing  [nKept]error
	nMissing int
	ctrl     int32
	ctrlSeen []byte
	// pass is the last pass in which the cgroup was read.
	pass uint64
}

var fControllers = newCname("cgroup.controllers")

// NewKeepReader returns a Reader that keeps each cgroup's files open
// between passes and re-reads them with pread(2) at offset 0, which makes
// a cgroup file (a kernfs seq_file) generate its content afresh
// (fs/seq_file.c, seq_read_iter: a position other than the last read's
// restarts the traversal). A pass then costs one syscall per file instead
// of an open, a read and a close, and one open and close of the directory.
//
// The caller ends each pass with EndPass, which closes the files of the
// cgroups not read in it (removed pods), and releases everything with
// Close. Each open cgroup file holds a page of kernel memory for its
// seq_file buffer once read, charged to the reader's memory cgroup.
func NewKeepReader(opts KeepOptions) *Reader {
	limit := opts.MaxFiles
	if limit <= 0 {
		var rl unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil && rl.Cur < 1<<30 {
			limit = int(rl.Cur / 4 * 3)
		} else {
			limit = 1024
		}
		limit = min(limit, DefaultMaxKeptFiles)
	}
	r := NewReader()
	r.keep = &keeper{groups: map[string]*keptGroup{}, maxFiles: limit, ctrlBuf: make([]byte, 0, 256)}
	return r
}

// Keeping reports what the Reader keeps open; all zero for a Reader made by
// NewReader.
func (r *Reader) Keeping() KeepStats {
	if r.keep == nil {
		return KeepStats{}
	}
	return KeepStats{Groups: len(r.keep.groups), Files: r.keep.files, MaxFiles: r.keep.maxFiles}
}

// EndPass closes the files of the cgroups not read since the previous
// EndPass. It does nothing for a Reader made by NewReader.
func (r *Reader) EndPass() {
	k := r.keep
	if k == nil {
		return
	}
	for dir, g := range k.groups {
		if g.pass != k.pass {
			k.drop(dir, g)
		}
	}
	k.pass++
}

// Close closes every file the Reader keeps open. The Reader stays usable.
func (r *Reader) Close() error {
	if k := r.keep; k != nil {
		for dir, g := range k.groups {
			k.drop(dir, g)
		}
	}
	return nil
}

// readKept is Read for a Reader that keeps files open.
func (r *Reader) readKept(dir string, mask Mask, out *Stats) error {
	k := r.keep
	// A kept file that fails means the cgroup changed under it: the
	// second attempt reads it afresh, as a new cgroup.
	for attempt := 0; attempt < 2; attempt++ {
		g := k.groups[dir]
		if g != nil && !k.valid(g) {
			k.drop(dir, g)
			g = nil
		}
		if g == nil {
			fd, err := openDir(dir)
			if err != nil {
				return err
			}
			if k.files+nKept+1 > k.maxFiles {
				r.read(fd, dir, mask, out)
				closeFd(fd)
				return nil
			}
			g = &keptGroup{ctrl: -1}
			for i := range g.fds {
				g.fds[i] = -1
			}
			k.groups[dir] = g
			r.curDir = fd
		}
		g.pass = k.pass
		r.cur, r.stale = g, false
		r.read(-1, dir, mask, out)
		r.cur = nil
		if r.curDir >= 0 {
			closeFd(r.curDir)
			r.curDir = -1
		}
		if !r.stale {
			return nil
		}
		k.drop(dir, g)
	}
	return nil
}

// fetch returns the content of the file name of the cgroup dir: read
// through the kept cgroup r.cur when there is one, else opened under fd.
func (r *Reader) fetch(fd int, dir string, name cname) ([]byte, error) {
	g := r.cur
	if g == nil || name.k < 0 {
		return readAt(fd, dir, name, &r.buf)
	}
	i := name.k
	if f := g.fds[i]; f >= 0 {
		data, err := preadAll(int(f), &r.buf)
		if err != nil {
			r.stale = true
			return nil, classifyAt(dir, name.s, err)
		}
		return data, nil
	}
	if e := g.missing[i]; e != nil {
		return nil, e
	}
	if r.curDir < 0 {
		dfd, err := openDir(dir)
		if err != nil {
			r.stale = true
			return nil, err
		}
		r.curDir = dfd
	}
	f, err := openAt(r.curDir, name)
	if err != nil {
		ferr := classifyAt(dir, name.s, err)
		if !errors.Is(ferr, ErrMissing) || !r.keep.snapshotControllers(g, r.curDir) {
			return nil, ferr
		}
		// Opened again after the snapshot, so that a controller enabled
		// in between is not remembered as missing.
		if f, err = openAt(r.curDir, name); err != nil {
			ferr = classifyAt(dir, name.s, err)
			if errors.Is(ferr, ErrMissing) {
				g.missing[i] = ferr
				g.nMissing++
			}
			return nil, ferr
		}
	}
	if r.keep.files >= r.keep.maxFiles {
		// No room left (the cgroup was kept for fewer files): read it
		// this once.
		defer closeFd(f)
	} else {
		g.fds[i] = int32(f)
		r.keep.files++
	}
	data, err := preadAll(f, &r.buf)
	if err != nil {
		r.stale = true
		return nil, classifyAt(dir, name.s, err)
	}
	return data, nil
}

// snapshotControllers keeps g's cgroup.controllers open and remembers its
// content, so that missing files can be remembered; false when the file
// cannot be read (not a cgroup2 directory).
func (k *keeper) snapshotControllers(g *keptGroup, dirfd int) bool {
	if g.ctrl >= 0 {
		return true
	}
	if k.files >= k.maxFiles {
		return false
	}
	f, err := openAt(dirfd, fControllers)
	if err != nil {
		return false
	}
	data, err := preadAll(f, &k.ctrlBuf)
	if err != nil {
		closeFd(f)
		return false
	}
	g.ctrl, g.ctrlSeen = int32(f), bytes.Clone(data)
	k.files++
	return true
}

// valid tells whether the files g remembers as missing are still missing:
// its cgroup.controllers did not change.
func (k *keeper) valid(g *keptGroup) bool {
	if g.nMissing == 0 {
		return true
	}
	data, err := preadAll(int(g.ctrl), &k.ctrlBuf)
	return err == nil && bytes.Equal(data, g.ctrlSeen)
}

// drop closes g's files and forgets it.
func (k *keeper) drop(dir string, g *keptGroup) {
	for i, f := range g.fds {
		if f >= 0 {
			closeFd(int(f))
			g.fds[i] = -1
			k.files--
		}
	}
	if g.ctrl >= 0 {
		closeFd(int(g.ctrl))
		g.ctrl = -1
		k.files--
	}
	delete(k.groups, dir)
}

// openAt opens name under dirfd without allocating.
func openAt(dirfd int, name cname) (int, error) {
	r, _, e := unix.Syscall6(unix.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(&name.z[0])),
		uintptr(unix.O_RDONLY|unix.O_CLOEXEC), 0, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// preadAll reads the file fd from offset 0 into *buf (grown as needed), up
// to the first short read. A short read is the end of the file for what
// nodeshim reads: cgroup and proc files are seq_files, which fill the
// buffer until the last record (fs/seq_file.c, seq_read_iter), and regular
// files (a recorded tree) return all bytes up to i_size. Stopping there
// saves the read that would return 0, a third of the syscalls of a small
// file.
func preadAll(fd int, buf *[]byte) ([]byte, error) {
	b := (*buf)[:cap(*buf)]
	if len(b) == 0 {
		b = make([]byte, 4096)
	}
	n := 0
	for {
		if n == len(b) {
			b = append(b, make([]byte, len(b))...)
			b = b[:cap(b)]
		}
		m, err := unix.Pread(fd, b[n:], int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			*buf = b[:0]
			return nil, err
		}
		n += m
		if m == 0 || n < len(b) {
			break
		}
	}
	*buf = b[:0]
	return b[:n], nil
}

// dirInode returns the inode number of the directory at path: a cgroup's
// id on cgroup2.
func dirInode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}
