package vmtest

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Builder builds the binaries that go into the guest.
type Builder struct {
	// Go is the go command.
	Go string
	// Root is the module root.
	Root string
	// OutDir receives the binaries; it is emptied first.
	OutDir string
	// Run runs go and ldd.
	Run Runner
}

// Binary is one program built for the guest, with the shared libraries it
// needs there.
type Binary struct {
	// Path is the binary on the host.
	Path string
	// Libs lists the host paths of the shared objects it loads, the loader
	// included; empty for a static binary.
	Libs []string
}

// usesCgo reports whether pkg (with its tests when test is set) depends on a
// package outside the standard library that uses cgo.
func (b *Builder) usesCgo(ctx context.Context, pkg string, test bool) (bool, error) {
	args := []string{"list", "-tags", Tag, "-deps", "-f", "{{if and .CgoFiles (not .Standard)}}{{.ImportPath}}{{end}}"}
	if test {
		args = append(args, "-test")
	}
	out, err := b.Run(ctx, b.Root, "env", append([]string{"CGO_ENABLED=1", b.Go}, append(args, pkg)...)...)
	if err != nil {
		return false, fmt.Errorf("list dependencies of %s: %w", pkg, err)
	}
	return len(bytes.TrimSpace(out)) > 0, nil
}

// TestBinary builds `go test -c -tags vmtest` for p into OutDir.
func (b *Builder) TestBinary(ctx context.Context, p *Package) (Binary, error) {
	cgo, err := b.usesCgo(ctx, p.ImportPath, true)
	if err != nil {
		return Binary{}, err
	}
	p.Cgo = cgo
	out := filepath.Join(b.OutDir, p.Name+".test")
	// Without the symbol table and DWARF (-s -w) the binaries are a
	// quarter smaller, and the guest holds them all in its memory; stack
	// traces need neither.
	if err := b.goBuild(ctx, cgo, "test", "-c", "-tags", Tag, "-ldflags=-s -w", "-o", out, p.ImportPath); err != nil {
		return Binary{}, fmt.Errorf("build test binary of %s: %w", p.ImportPath, err)
	}
	// go test -c writes nothing for a package without test files.
	if _, err := os.Stat(out); err != nil {
		return Binary{}, fmt.Errorf("%w: go test -c %s produced no %s: %w", ErrMissingBinary, p.ImportPath, out, err)
	}
	return b.withLibs(ctx, out)
}

// Program builds the main package pkg into OutDir/name.
func (b *Builder) Program(ctx context.Context, pkg, name string, ldflags string) (Binary, error) {
	cgo, err := b.usesCgo(ctx, pkg, false)
	if err != nil {
		return Binary{}, err
	}
	out := filepath.Join(b.OutDir, name)
	if err := b.goBuild(ctx, cgo, "build", "-trimpath", "-ldflags", ldflags, "-o", out, pkg); err != nil {
		return Binary{}, fmt.Errorf("build %s: %w", pkg, err)
	}
	return b.withLibs(ctx, out)
}

func (b *Builder) goBuild(ctx context.Context, cgo bool, args ...string) error {
	env := "CGO_ENABLED=0"
	if cgo {
		env = "CGO_ENABLED=1"
	}
	_, err := b.Run(ctx, b.Root, "env", append([]string{env, b.Go}, args...)...)
	return err
}

// withLibs adds the shared libraries of a dynamically linked binary.
func (b *Builder) withLibs(ctx context.Context, path string) (Binary, error) {
	dynamic, err := IsDynamic(path)
	if err != nil {
		return Binary{}, err
	}
	if !dynamic {
		return Binary{Path: path}, nil
	}
	out, err := b.Run(ctx, b.Root, "ldd", path)
	if err != nil {
		return Binary{}, fmt.Errorf("list shared libraries of %s: %w", path, err)
	}
	libs, err := ParseLdd(out)
	if err != nil {
		return Binary{}, fmt.Errorf("ldd %s: %w", path, err)
	}
	return Binary{Path: path, Libs: libs}, nil
}

// IsDynamic reports whether the ELF file at path asks for a program
// interpreter (the dynamic loader).
func IsDynamic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, fmt.Errorf("read ELF %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return true, nil
		}
	}
	return false, nil
}

// ErrLdd is wrapped by ParseLdd for output it cannot use.
var ErrLdd = errors.New("unusable ldd output")

// ParseLdd returns the absolute paths of the shared objects that ldd lists,
// the loader included, in order and without duplicates. The vDSO, which the
// kernel provides, has no path and is left out; a library that ldd did not
// find is an error.
func ParseLdd(out []byte) ([]string, error) {
	var libs []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line == "statically linked" {
			continue
		}
		var path string
		if name, rest, ok := strings.Cut(line, "=>"); ok {
			rest = strings.TrimSpace(rest)
			if strings.HasPrefix(rest, "not found") {
				return nil, fmt.Errorf("%w: %s not found", ErrLdd, strings.TrimSpace(name))
			}
			fields := strings.Fields(rest)
			if len(fields) == 0 || strings.HasPrefix(fields[0], "(") {
				continue // "linux-vdso.so.1 =>  (0x...)" on old glibc
			}
			path = fields[0]
		} else {
			path = strings.Fields(line)[0]
		}
		if !strings.HasPrefix(path, "/") {
			continue // linux-vdso.so.1
		}
		path = filepath.Clean(path)
		if !seen[path] {
			seen[path] = true
			libs = append(libs, path)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLdd, err)
	}
	return libs, nil
}
