package transfer

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// member is one tar member of a hostile stream.
type member struct {
	name     string
	typ      byte
	body     string
	linkname string
}

func tarOf(t testing.TB, ms ...member) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, m := range ms {
		h := &tar.Header{Name: m.name, Typeflag: m.typ, Size: int64(len(m.body)), Mode: 0o644, Linkname: m.linkname}
		if m.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if m.typ == tar.TypeReg {
			tw.Write([]byte(m.body))
		}
	}
	tw.Close()
	return b.Bytes()
}

// TestUnpackRefuses: what a trusted sender's stream may hold is plain
// files with plain names, within the bound; anything else is refused and
// nothing is written outside the directory.
func TestUnpackRefuses(t *testing.T) {
	for _, tt := range []struct {
		name    string
		members []member
		max     int64
		class   error
	}{
		{"parent path", []member{{name: "../escape", typ: tar.TypeReg, body: "x"}}, 1 << 20, errdefs.ErrInvalidArgument},
		{"absolute path", []member{{name: "/etc/passwd", typ: tar.TypeReg, body: "x"}}, 1 << 20, errdefs.ErrInvalidArgument},
		{"subdirectory", []member{{name: "a/b", typ: tar.TypeReg, body: "x"}}, 1 << 20, errdefs.ErrInvalidArgument},
		{"hidden", []member{{name: ".nodeshim-work-1-ab", typ: tar.TypeReg, body: "x"}}, 1 << 20, errdefs.ErrInvalidArgument},
		{"symlink", []member{{name: "manifest.json", typ: tar.TypeSymlink, linkname: "/etc/shadow"}}, 1 << 20, errdefs.ErrInvalidArgument},
		{"hard link", []member{{name: "x", typ: tar.TypeLink, linkname: "/etc/shadow"}}, 1 << 20, errdefs.ErrInvalidArgument},
		{"directory", []member{{name: "d", typ: tar.TypeDir}}, 1 << 20, errdefs.ErrInvalidArgument},
		{"device", []member{{name: "d", typ: tar.TypeChar}}, 1 << 20, errdefs.ErrInvalidArgument},
		{"twice", []member{{name: "a", typ: tar.TypeReg, body: "x"}, {name: "a", typ: tar.TypeReg, body: "y"}}, 1 << 20, errdefs.ErrInvalidArgument},
		{"over the bound", []member{{name: "a", typ: tar.TypeReg, body: "0123456789"}, {name: "b", typ: tar.TypeReg, body: "0123456789"}}, 15, ErrTooLarge},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "pod")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			_, err := Unpack(bytes.NewReader(tarOf(t, tt.members...)), dir, tt.max)
			if !errors.Is(err, tt.class) {
				t.Fatalf("unpack: %v, want %v", err, tt.class)
			}
			if ents, _ := os.ReadDir(root); len(ents) != 1 {
				t.Errorf("something was written beside the directory: %v", ents)
			}
		})
	}
}

func TestUnpack(t *testing.T) {
	dir := t.TempDir()
	n, err := Unpack(bytes.NewReader(tarOf(t, member{name: "manifest.json", typ: tar.TypeReg, body: "{}"}, member{name: "a.tar", typ: tar.TypeReg, body: "abc"})), dir, 5)
	if err != nil || n != 5 {
		t.Fatalf("unpack: %d, %v", n, err)
	}
	for f, want := range map[string]string{"manifest.json": "{}", "a.tar": "abc"} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err != nil || string(b) != want {
			t.Errorf("%s: %q %v", f, b, err)
		}
	}
}

// FuzzUnpack: whatever the stream, Unpack writes only plain files inside
// its directory and never more than its bound.
func FuzzUnpack(f *testing.F) {
	f.Add(tarOf(f, member{name: "manifest.json", typ: tar.TypeReg, body: "{}"}))
	f.Add(tarOf(f, member{name: "../x", typ: tar.TypeReg, body: "x"}))
	f.Add([]byte("not a tar"))
	f.Fuzz(func(t *testing.T, b []byte) {
		root := t.TempDir()
		dir := filepath.Join(root, "pod")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		n, _ := Unpack(bytes.NewReader(b), dir, 1<<16)
		if n > 1<<16 {
			t.Fatalf("%d bytes written over the bound", n)
		}
		if ents, _ := os.ReadDir(root); len(ents) != 1 {
			t.Fatalf("written beside the directory: %v", ents)
		}
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if !e.Type().IsRegular() || !plainName(e.Name()) {
				t.Fatalf("unpacked %q (%v)", e.Name(), e.Type())
			}
		}
	})
}

func TestNodeOf(t *testing.T) {
	for cn, want := range map[string]string{"system:node:node-a": "node-a", "node-b": "node-b", "": ""} {
		if got := NodeOf(cn); got != want {
			t.Errorf("NodeOf(%q) = %q, want %q", cn, got, want)
		}
	}
}
