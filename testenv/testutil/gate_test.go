package testutil

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEverySkipGoesThroughTheGate holds the module to the rule that makes
// `make test` trust a run without skips: no test skips but through Skip
// (and the Require* gates built on it), which fails under
// NODESHIM_REQUIRE_PRIVILEGED=1. A direct t.Skip, t.Skipf or t.SkipNow
// anywhere else would pass such a run silently.
func TestEverySkipGoesThroughTheGate(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	self, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || filepath.Dir(path) == self {
			return nil
		}
		files++
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		// The gate's name in this file: testutil, or what it is imported as.
		gate := "testutil"
		for _, imp := range f.Imports {
			if imp.Path.Value == `"github.com/nodeshim/nodeshim/testenv/testutil"` && imp.Name != nil {
				gate = imp.Name.Name
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			switch sel.Sel.Name {
			case "Skip", "Skipf", "SkipNow":
				if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == gate {
					return true
				}
				t.Errorf("%s: %s skips around the testutil gate; call testutil.Skip", fset.Position(call.Pos()), sel.Sel.Name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("walked %d Go files under %s; the module has more", files, root)
	}
}
