package seccomp

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// NodeParseOptions returns the ParseOptions of the running node: the
// container capabilities caps (nil: DefaultCaps) and the running kernel's
// version from uname(2), left zero when its release does not parse.
func NodeParseOptions(caps []string) ParseOptions {
	po := ParseOptions{Caps: caps}
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		if v, err := ParseRelease(unix.ByteSliceToString(u.Release[:])); err == nil {
			po.Kernel = v
		}
	}
	return po
}

// LoadFile reads the profile at path, parses it with po and compiles it with
// co: what every command that takes a profile file does. A profile that
// names a baseProfileName is stacked on its base (ResolveBase), read from
// the file the name gives, relative to path's directory unless absolute. What the compiler
// accepted with a remark is in the Filter's Warnings and Skipped. A file
// larger than MaxProfileBytes is refused without being read whole; the
// compilation gives up when ctx is done.
func LoadFile(ctx context.Context, path string, po ParseOptions, co CompileOptions) (*Profile, *Filter, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer file.Close()
	data, err := readProfile(file, path)
	if err != nil {
		return nil, nil, err
	}
	p, err := ResolveBase(path, data, po, func(ref string) ([]byte, error) {
		if strings.Contains(ref, "://") {
			return nil, fmt.Errorf("%s: %w", ref, errdefs.ErrNotSupported)
		}
		if !filepath.IsAbs(ref) {
			ref = filepath.Join(filepath.Dir(path), ref)
		}
		f, err := os.Open(ref)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return readProfile(f, ref)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("profile %s is invalid:\n%w", path, err)
	}
	f, err := CompileContext(ctx, p, co)
	if err != nil {
		return nil, nil, fmt.Errorf("profile %s: %w", path, err)
	}
	return p, f, nil
}

func readProfile(r io.Reader, path string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxProfileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read profile %s: %w", path, err)
	}
	return data, nil
}
