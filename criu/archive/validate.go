package archive

import (
	"archive/tar"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// ErrInvalid is returned, wrapped, for an archive (or a member of one)
// that nodeshim refuses to read, unpack or restore.
var ErrInvalid = errdefs.New(errdefs.ErrInvalidArgument, "invalid checkpoint archive")

// ErrTooLarge is returned, wrapped, for an archive that would expand past
// a bound of Limits or past the free space of its destination. It wraps
// ErrInvalid.
var ErrTooLarge = errdefs.New(ErrInvalid, "checkpoint archive too large")

// Limits on what Validate accepts, so that a hostile archive cannot
// exhaust memory or inodes before restore starts.
const (
	maxEntries    = 1 << 16
	maxPathLen    = 4096
	maxLinkHops   = 40 // the kernel's MAXSYMLINKS (include/linux/namei.h)
	maxTarNameLen = maxPathLen
)

// Default bounds of Limits.
const (
	// DefaultMaxBytes bounds what an archive's files add up to once
	// written out: 1 TiB, above any checkpoint's memory on a node, so that
	// the free space of the destination is what bounds a real archive.
	DefaultMaxBytes int64 = 1 << 40
	// DefaultMaxSparseBytes bounds the full size of an archive's sparse
	// members together. No runtime writes sparse members (archive/tar
	// cannot, and CRIU's images are plain files), so a few of them at most
	// are tolerated, never a member that claims gigabytes of holes.
	DefaultMaxSparseBytes int64 = 64 << 20
)

// Limits bound what an archive may expand to when it is written out. The
// zero value is DefaultMaxBytes and DefaultMaxSparseBytes; Unpack and
// ApplyRootfsDiff also bound it by the free space of their destination.
type Limits struct {
	// MaxBytes bounds the sum of the sizes of the archive's regular
	// files as written out, each sparse member counted at its full size.
	MaxBytes int64
	// MaxSparseBytes bounds the full size of the sparse members together;
	// a negative value refuses every sparse member.
	MaxSparseBytes int64
}

func (l Limits) maxBytes() int64 {
	if l.MaxBytes <= 0 {
		return DefaultMaxBytes
	}
	return l.MaxBytes
}

func (l Limits) maxSparse() int64 {
	switch {
	case l.MaxSparseBytes < 0:
		return 0
	case l.MaxSparseBytes == 0:
		return DefaultMaxSparseBytes
	}
	return l.MaxSparseBytes
}

// sizer adds up the sizes of an archive's members against Limits and,
// where set, the free space of the destination.
type sizer struct {
	l            Limits
	free         int64 // -1: not bounded by a filesystem
	where        string
	total, spars int64
}

func newSizer(l Limits, free int64, where string) *sizer {
	return &sizer{l: l, free: free, where: where}
}

// add counts h, a member about to be written out, and refuses it when it
// takes the archive past a bound. It names the member and the bound.
func (s *sizer) add(name string, h *tar.Header) error {
	if h.Size < 0 {
		return fmt.Errorf("%w: entry %q has size %d", ErrInvalid, name, h.Size)
	}
	if isSparse(h) {
		if h.Size > s.l.maxSparse()-s.spars {
			return fmt.Errorf("%w: entry %q is sparse and expands to %d bytes, past the bound of %d bytes on sparse entries", ErrTooLarge, name, h.Size, s.l.maxSparse())
		}
		s.spars += h.Size
	}
	if h.Size > s.l.maxBytes()-s.total {
		return fmt.Errorf("%w: entry %q (%d bytes) takes the archive past its bound of %d bytes", ErrTooLarge, name, h.Size, s.l.maxBytes())
	}
	if s.free >= 0 && h.Size > s.free-s.total {
		return fmt.Errorf("%w: entry %q (%d bytes) takes the archive past the %d bytes free in %s", ErrTooLarge, name, h.Size, s.free, s.where)
	}
	s.total += h.Size
	return nil
}

// isSparse reports whether h is a GNU sparse member: the old GNU format's
// type 'S', or the PAX formats 0.0 to 1.0, whose GNU.sparse.* records
// archive/tar keeps in PAXRecords. Its Size is then the expanded size.
func isSparse(h *tar.Header) bool {
	if h.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// Entry is one validated member of a checkpoint archive.
type Entry struct {
	Name     string
	Type     byte
	Size     int64
	Linkname string
}

// Validate reads a whole tar stream and checks it is a checkpoint archive
// nodeshim can restore safely, within the default Limits: see
// ValidateLimits.
func Validate(r io.Reader) ([]Entry, error) { return ValidateLimits(r, Limits{}) }

// ValidateLimits reads a whole tar stream and checks it is a checkpoint
// archive nodeshim can restore safely: only directories, regular files and
// symlinks; no absolute names, no "..", no duplicates, no entry under a
// symlink; every symlink, followed through the archive's other symlinks
// as the kernel would follow them, stays inside the archive; the files
// add up to no more than l allows; a checkpoint/ directory with
// inventory.img, and config.dump and spec.dump at the root. It returns the
// entries in archive order.
func ValidateLimits(r io.Reader, l Limits) ([]Entry, error) {
	tr := tar.NewReader(r)
	t := newTree()
	sz := newSizer(l, -1, "")
	var entries []Entry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: read tar: %w", ErrInvalid, err)
		}
		if len(entries) >= maxEntries {
			return nil, fmt.Errorf("%w: more than %d entries", ErrInvalid, maxEntries)
		}
		name, err := cleanEntryName(h.Name)
		if err != nil {
			return nil, err
		}
		e := Entry{Name: name, Type: h.Typeflag, Size: h.Size}
		switch h.Typeflag {
		case tar.TypeDir:
		case tar.TypeReg:
			if err := sz.add(h.Name, h); err != nil {
				return nil, err
			}
		case tar.TypeSymlink:
			if err := checkSymlink(name, h.Linkname); err != nil {
				return nil, err
			}
			e.Linkname = h.Linkname
		default:
			return nil, fmt.Errorf("%w: entry %q has type %q; only directories, regular files and symlinks are allowed", ErrInvalid, h.Name, h.Typeflag)
		}
		if err := t.add(h.Name, name, h.Typeflag, h.Linkname); err != nil {
			return nil, err
		}
		entries = append(entries, e)
	}
	if err := t.checkLinks(); err != nil {
		return nil, err
	}
	if typ, ok := t.types[ImagesDir]; !ok || typ != tar.TypeDir {
		return nil, fmt.Errorf("%w: no %s/ directory entry", ErrInvalid, ImagesDir)
	}
	for _, f := range []string{ConfigDump, SpecDump, Inventory} {
		if typ, ok := t.types[f]; !ok || typ != tar.TypeReg {
			return nil, fmt.Errorf("%w: no regular file %s", ErrInvalid, f)
		}
	}
	return entries, nil
}

// tree is the shape of an archive as its entries are read: what each
// name is, the directories entries imply, and the symlinks.
type tree struct {
	types    map[string]byte   // the entries
	implied  map[string]bool   // parents of entries
	links    map[string]string // symlink name -> target
	linkList []string          // links in archive order
}

func newTree() *tree {
	return &tree{types: map[string]byte{}, implied: map[string]bool{}, links: map[string]string{}}
}

// add records an entry, refusing a duplicate, an entry under anything
// but a directory, and a non-directory over names already under it.
func (t *tree) add(raw, name string, typ byte, link string) error {
	if _, dup := t.types[name]; dup {
		return fmt.Errorf("%w: entry %q appears twice", ErrInvalid, raw)
	}
	if typ != tar.TypeDir && t.implied[name] {
		return fmt.Errorf("%w: entry %q is not a directory, but earlier entries lie under it", ErrInvalid, raw)
	}
	// Every parent must be a directory this archive created or an
	// implicit one, never a symlink: writing through a symlinked
	// parent is how archives escape.
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		if pt, ok := t.types[dir]; ok && pt != tar.TypeDir {
			return fmt.Errorf("%w: entry %q lies under %q, which is not a directory", ErrInvalid, raw, dir)
		}
		t.implied[dir] = true
	}
	t.types[name] = typ
	if typ == tar.TypeSymlink {
		t.links[name] = link
		t.linkList = append(t.linkList, name)
	}
	return nil
}

// checkLinks follows every symlink through the others, component by
// component as the kernel's path walk does (fs/namei.c: a symlink met
// in the middle of a path or at its end is replaced by its target, ".."
// goes to the parent of what the walk has reached so far), and refuses
// one that leaves the archive's root or loops. A name the archive does
// not have is taken as a directory, the worst case for a later walk.
func (t *tree) checkLinks() error {
	for _, name := range t.linkList {
		hops := 0
		if _, err := t.walk(strings.Split(path.Dir(name), "/"), t.links[name], &hops); err != nil {
			return fmt.Errorf("%w: symlink %q points to %q, which %v", ErrInvalid, name, t.links[name], err)
		}
	}
	return nil
}

var (
	errEscapes = fmt.Errorf("leads outside the archive")
	errLoops   = fmt.Errorf("loops through more than %d symlinks", maxLinkHops)
)

// walk resolves target from the directory at (components, "." for the
// root) and returns where it ends.
func (t *tree) walk(at []string, target string, hops *int) ([]string, error) {
	if strings.HasPrefix(target, "/") {
		return nil, errEscapes
	}
	cur := make([]string, 0, len(at)+8)
	for _, c := range at {
		if c != "." && c != "" {
			cur = append(cur, c)
		}
	}
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			if len(cur) == 0 {
				return nil, errEscapes
			}
			cur = cur[:len(cur)-1]
			continue
		}
		cur = append(cur, c)
		link, ok := t.links[strings.Join(cur, "/")]
		if !ok {
			continue
		}
		if *hops++; *hops > maxLinkHops {
			return nil, errLoops
		}
		var err error
		if cur, err = t.walk(cur[:len(cur)-1], link, hops); err != nil {
			return nil, err
		}
	}
	return cur, nil
}

// cleanEntryName returns the archive-relative name of a tar entry, refusing
// absolute names and "..". A leading "./" is accepted (tar writes it).
func cleanEntryName(name string) (string, error) {
	if len(name) > maxTarNameLen {
		return "", fmt.Errorf("%w: entry name of %d bytes", ErrInvalid, len(name))
	}
	if name == "" || strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("%w: empty or NUL-bearing entry name %q", ErrInvalid, name)
	}
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("%w: entry %q has an absolute path", ErrInvalid, name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", fmt.Errorf("%w: entry %q contains \"..\"", ErrInvalid, name)
		}
	}
	clean := path.Clean(strings.TrimPrefix(name, "./"))
	if clean == "." || clean == "" {
		return "", fmt.Errorf("%w: entry %q names the archive root", ErrInvalid, name)
	}
	return clean, nil
}

// checkSymlink refuses a symlink whose target is absolute or leaves the
// archive once resolved relative to the link's directory, the link taken
// alone; checkLinks then follows it through the archive's other links.
func checkSymlink(name, target string) error {
	if target == "" || strings.HasPrefix(target, "/") || strings.ContainsRune(target, 0) || len(target) > maxPathLen {
		return fmt.Errorf("%w: symlink %q points to %q, outside the archive", ErrInvalid, name, target)
	}
	depth := strings.Count(name, "/") // directories above the link
	for _, part := range strings.Split(target, "/") {
		switch part {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return fmt.Errorf("%w: symlink %q points to %q, outside the archive", ErrInvalid, name, target)
			}
		default:
			depth++
		}
	}
	return nil
}
