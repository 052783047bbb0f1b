package vmtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Tag is the build tag of test files that need a guest.
const Tag = "vmtest"

// FileSuffix is how the name of a test file that needs a guest ends.
const FileSuffix = "_vm_test.go"

// Package is one Go package with guest tests.
type Package struct {
	// ImportPath is the package's import path.
	ImportPath string
	// Dir is its source directory on the host.
	Dir string
	// Rel is Dir relative to the module root, "." for the root.
	Rel string
	// Name names its test binary in the guest, unique per package.
	Name string
	// Tests lists the Test functions declared in its vmtest-tagged files.
	Tests []string
	// Cgo says that the test binary depends on cgo outside the standard library.
	Cgo bool
	// HostSuite says that the guest runs every test of the package, its
	// ordinary tests too (see HostSuite), not only Tests.
	HostSuite bool
}

// RunPattern is the -test.run pattern that selects p's tests in the guest:
// exactly its guest tests, or every test when it runs its host suite.
func (p Package) RunPattern() string {
	if p.HostSuite {
		return "."
	}
	return "^(" + strings.Join(p.Tests, "|") + ")$"
}

// listedPackage is the part of `go list -json` output that Discover reads.
type listedPackage struct {
	ImportPath   string
	Dir          string
	TestGoFiles  []string
	XTestGoFiles []string
	Error        *struct{ Err string }
}

// Discover lists the packages under root (a module root) that the guests
// test: those that have vmtest-tagged test files, with the Test functions
// those files declare, and, when suite is not nil, those whose host suite it
// says to run (Package.HostSuite). A `*_vm_test.go` file without the tag is
// an error: on the host it would run and fail at testutil.RequireGuest. So
// is a suite that does not decide every package with ordinary tests, or
// that names a package without them.
func Discover(ctx context.Context, run Runner, goTool, root string, suite []Decision) ([]Package, error) {
	out, err := run(ctx, root, goTool, "list", "-tags", Tag, "-json=ImportPath,Dir,TestGoFiles,XTestGoFiles,Error", "./...")
	if err != nil {
		return nil, fmt.Errorf("list packages: %w", err)
	}
	decided := map[string]Decision{}
	for _, d := range suite {
		if _, dup := decided[d.Rel]; dup {
			return nil, fmt.Errorf("host suite: %s decided twice", d.Rel)
		}
		decided[d.Rel] = d
	}
	var undecided []string
	var pkgs []Package
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var lp listedPackage
		if err := dec.Decode(&lp); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("decode go list output: %w", err)
		}
		if lp.Error != nil {
			return nil, fmt.Errorf("go list %s: %s", lp.ImportPath, lp.Error.Err)
		}
		var tests []string
		ordinary := false
		for _, name := range append(append([]string(nil), lp.TestGoFiles...), lp.XTestGoFiles...) {
			path := filepath.Join(lp.Dir, name)
			src, err := os.ReadFile(path)
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", path, err)
			}
			tagged, err := GuestOnly(src)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			if !tagged {
				if strings.HasSuffix(name, FileSuffix) {
					return nil, fmt.Errorf("%s: a %s file must start with //go:build %s", path, FileSuffix, Tag)
				}
				ordinary = true
				continue
			}
			names, err := TestNames(path, src)
			if err != nil {
				return nil, err
			}
			tests = append(tests, names...)
		}
		rel, err := filepath.Rel(root, lp.Dir)
		if err != nil {
			return nil, fmt.Errorf("package %s: %w", lp.ImportPath, err)
		}
		rel = filepath.ToSlash(rel)
		d, ok := decided[rel]
		delete(decided, rel)
		if suite != nil && ordinary && !ok {
			undecided = append(undecided, rel)
		}
		if suite != nil && ok && !ordinary {
			return nil, fmt.Errorf("host suite: %s has no ordinary tests", rel)
		}
		hostSuite := ok && d.Run
		if len(tests) == 0 && !hostSuite {
			continue
		}
		pkgs = append(pkgs, Package{ImportPath: lp.ImportPath, Dir: lp.Dir, Rel: rel, Name: BinaryName(rel), Tests: sortedCopy(tests), HostSuite: hostSuite})
	}
	if len(undecided) > 0 {
		return nil, fmt.Errorf("host suite: decide whether the guests run the tests of %s (vmtest.HostSuite)", strings.Join(undecided, ", "))
	}
	if len(decided) > 0 {
		return nil, fmt.Errorf("host suite: no package with tests at %s", strings.Join(sortedKeys(decided), ", "))
	}
	return pkgs, nil
}

// BinaryName turns a package directory relative to the module root into the
// name of its test binary in the guest ("testenv/vmtest" -> "internal_vmtest").
func BinaryName(rel string) string {
	if rel == "." || rel == "" {
		return "root"
	}
	return strings.ReplaceAll(filepath.ToSlash(rel), "/", "_")
}

// GuestOnly reports whether a Go file's build constraint includes the file
// with the vmtest tag and excludes it without, on linux/amd64.
func GuestOnly(src []byte) (bool, error) {
	expr, err := buildConstraint(src)
	if err != nil || expr == nil {
		return false, err
	}
	with := expr.Eval(func(tag string) bool { return tag == Tag || hostTag(tag) })
	without := expr.Eval(hostTag)
	return with && !without, nil
}

// goVersionTag matches the go1.N release tags.
var goVersionTag = regexp.MustCompile(`^go1\.[0-9]+$`)

// hostTag says which tags other than vmtest hold for the guest's binaries.
func hostTag(tag string) bool {
	switch tag {
	case "linux", "amd64", "unix", "gc", "cgo":
		return true
	}
	return goVersionTag.MatchString(tag)
}

// buildConstraint returns the //go:build expression of a Go file, or nil.
// Like the go command, it reads only the comments before the package clause.
func buildConstraint(src []byte) (constraint.Expr, error) {
	for _, line := range strings.Split(string(src), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "//") && !constraint.IsGoBuild(line):
			continue
		case constraint.IsGoBuild(line):
			expr, err := constraint.Parse(line)
			if err != nil {
				return nil, fmt.Errorf("parse %q: %w", line, err)
			}
			return expr, nil
		default:
			return nil, nil // the package clause or a block comment: no constraint
		}
	}
	return nil, nil
}

// TestNames returns the names of the top-level Test functions of a Go file.
func TestNames(path string, src []byte) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	var names []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || !isTestName(fn.Name.Name) || fn.Type.Params == nil || len(fn.Type.Params.List) != 1 {
			continue
		}
		names = append(names, fn.Name.Name)
	}
	return names, nil
}

// isTestName follows `go test`: "Test" followed by nothing or a non-lower-case letter.
func isTestName(name string) bool {
	rest, ok := strings.CutPrefix(name, "Test")
	if !ok || name == "TestMain" {
		return false
	}
	return rest == "" || !(rest[0] >= 'a' && rest[0] <= 'z')
}
