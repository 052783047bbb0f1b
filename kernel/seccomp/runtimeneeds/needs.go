package runtimeneeds

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/internal/atomicfile"
	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// Identity names one runtime binary on one kernel: a measurement holds for
// it and for nothing else.
type Identity struct {
	// Path is the binary's absolute path as it is run (a wrapper keeps
	// its own path).
	Path string `json:"path"`
	// Version is the first line of "PATH --version", e.g. "runc version
	// 1.1.5+ds1" or "crun version 1.8.1".
	Version string `json:"version"`
	// Size and ModTime are the binary's, after symbolic links: a binary
	// replaced in place under the same version string is measured again.
	Size    int64     `json:"size"`
	ModTime time.Time `json:"modTime"`
	// Kernel is the kernel release the runtime ran on: a runtime probes
	// the kernel (close_range, clone3, openat2) and takes other paths on
	// another kernel.
	Kernel string `json:"kernel"`
}

// String names the runtime for logs: its version and path.
func (id Identity) String() string { return fmt.Sprintf("%s (%s)", id.Version, id.Path) }

// key is the cache file's name for id.
func (id Identity) key() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00%d\x00%s", id.Path, id.Version, id.Size, id.ModTime.UnixNano(), id.Kernel)
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// Identify finds the runtime binary named by runtime (a path, or a name
// looked up on PATH) and returns its Identity: it runs "RUNTIME --version".
func Identify(ctx context.Context, runtime string) (Identity, error) {
	path, err := exec.LookPath(runtime)
	if err != nil {
		return Identity{}, fmt.Errorf("runtime %s: %w: %w", runtime, errdefs.ErrNotFound, err)
	}
	if path, err = filepath.Abs(path); err != nil {
		return Identity{}, fmt.Errorf("runtime %s: %w", runtime, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return Identity{}, fmt.Errorf("runtime %s: %w", runtime, err)
	}
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return Identity{}, fmt.Errorf("%s --version: %w", path, err)
	}
	version, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if version == "" {
		return Identity{}, fmt.Errorf("%s --version printed nothing", path)
	}
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return Identity{}, fmt.Errorf("uname: %w", err)
	}
	return Identity{
		Path:    path,
		Version: strings.TrimSpace(version),
		Size:    st.Size(),
		ModTime: st.ModTime().UTC(),
		Kernel:  unix.ByteSliceToString(uts.Release[:]),
	}, nil
}

// Needs is what a runtime's container init does under the container's
// seccomp filter, measured.
type Needs struct {
	// Runtime is the binary measured.
	Runtime Identity `json:"runtime"`
	// Syscalls are the names, sorted and unique, of the syscalls its
	// init made from the filter load to the execve of the container's
	// process, with and without no_new_privileges.
	Syscalls []string `json:"syscalls"`
	// SignalHandlers says that the init loaded its filter with signal
	// handlers installed, which puts rt_sigreturn in Syscalls even when
	// no signal came while it was measured.
	SignalHandlers bool `json:"signalHandlers,omitempty"`
	// Runs is how many times the trivial container was run.
	Runs int `json:"runs"`
	// Measured is when.
	Measured time.Time `json:"measured"`
}

// maxCacheFile bounds what Cache.Load reads: a measurement is a few
// hundred bytes of names.
const maxCacheFile = 64 << 10

// Cache keeps measurements on disk, one file per Identity, under Dir
// (created 0700 when missing).
type Cache struct {
	Dir string
}

// path is where id's measurement is kept.
func (c *Cache) path(id Identity) string {
	return filepath.Join(c.Dir, "runtime-needs-"+id.key()+".json")
}

// Load returns the measurement kept for id, or an error wrapping
// errdefs.ErrNotFound when there is none. A file that does not parse, or
// holds another identity, is an error naming it (and is replaced by the
// next Store).
func (c *Cache) Load(id Identity) (*Needs, error) {
	path := c.path(id)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("runtime needs of %s in %s: %w", id, c.Dir, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("runtime needs cache: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxCacheFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > maxCacheFile {
		return nil, fmt.Errorf("%s: %w", path, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("larger than %d bytes", maxCacheFile)))
	}
	needs, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if !needs.Runtime.equal(id) {
		return nil, fmt.Errorf("%s: %w", path, errdefs.New(errdefs.ErrInvalidArgument,
			fmt.Sprintf("holds the needs of %+v, not of %+v", needs.Runtime, id)))
	}
	return needs, nil
}

func (id Identity) equal(o Identity) bool {
	return id.Path == o.Path && id.Version == o.Version && id.Size == o.Size &&
		id.ModTime.Equal(o.ModTime) && id.Kernel == o.Kernel
}

// Store keeps needs under its runtime's identity, replacing what was there
// (written whole: O_EXCL temporary file, fsync, rename), and removes what
// was kept for an earlier binary at the same path: a runtime upgraded in
// place leaves no stale file behind.
func (c *Cache) Store(needs *Needs) error {
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return fmt.Errorf("runtime needs cache: %w", err)
	}
	data, err := json.MarshalIndent(needs, "", "  ")
	if err != nil {
		return fmt.Errorf("encode runtime needs: %w", err)
	}
	path := c.path(needs.Runtime)
	if err := atomicfile.WriteFile(path, append(data, '\n'), 0o600); err != nil {
		return err
	}
	kept, err := filepath.Glob(filepath.Join(c.Dir, "runtime-needs-*.json"))
	if err != nil {
		return fmt.Errorf("runtime needs cache: %w", err)
	}
	for _, k := range kept {
		if k == path {
			continue
		}
		b, err := os.ReadFile(k)
		if err != nil || len(b) > maxCacheFile {
			continue
		}
		// A file that does not decode is left alone: Load reports it
		// for its own identity, and Store replaces it then.
		if old, err := Decode(b); err == nil && old.Runtime.Path == needs.Runtime.Path {
			if err := os.Remove(k); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("runtime needs cache: %w", err)
			}
		}
	}
	return nil
}

// Decode parses a kept measurement and checks it: known fields only, a
// runtime path and version, and syscall names that are names (lower case
// letters, digits and '_'), sorted and unique.
func Decode(data []byte) (*Needs, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var n Needs
	if err := dec.Decode(&n); err != nil {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("decode runtime needs: %v", err))
	}
	if dec.More() {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "decode runtime needs: data after the object")
	}
	if n.Runtime.Path == "" || n.Runtime.Version == "" {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "runtime needs without a runtime path or version")
	}
	if len(n.Syscalls) == 0 {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "runtime needs without syscalls")
	}
	for i, s := range n.Syscalls {
		if !validName(s) {
			return nil, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("runtime needs: syscalls[%d] %q is not a syscall name", i, s))
		}
	}
	if !slices.IsSorted(n.Syscalls) || len(slices.Compact(slices.Clone(n.Syscalls))) != len(n.Syscalls) {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "runtime needs: syscalls are not sorted and unique")
	}
	return &n, nil
}

// validName says whether s can be a syscall name of libseccomp's tables.
func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}
