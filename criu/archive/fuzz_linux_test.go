package archive

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/criu/archive/archivetest"
)

// FuzzUnpack: whatever the tar holds (symlinks and chains of them, hard
// links, sparse members, members past the bounds), Unpack creates
// nothing outside its directory and changes nothing there; when it fails
// it leaves the directory empty; when it succeeds, every symlink in the
// directory, followed as the kernel follows it, stays inside.
func FuzzUnpack(f *testing.F) {
	for _, tc := range archiveCases {
		f.Add(makeTar(f, tc.Members))
	}
	m := archivetest.Minimal("{}", "{}")
	for _, extra := range [][]archivetest.Member{
		archivetest.ChainOut("rootfs-diff.tar", 2, "etc/passwd"),
		{{Name: "checkpoint/a", Type: tar.TypeSymlink, Link: "b"}, {Name: "checkpoint/b", Type: tar.TypeSymlink, Link: "a"}},
		{{Name: "checkpoint/a", Type: tar.TypeSymlink, Link: "../config.dump"}, {Name: "c", Type: tar.TypeSymlink, Link: "checkpoint/a"}},
		{{Name: "checkpoint/hard", Type: tar.TypeLink, Link: "config.dump"}},
		{{Name: "checkpoint/hard", Type: tar.TypeLink, Link: "../../outside"}},
		{{Name: "checkpoint/d/f", Type: tar.TypeReg, Body: "x"}, {Name: "checkpoint/d", Type: tar.TypeSymlink, Link: ".."}},
		{{Name: "checkpoint/big", Type: tar.TypeReg, Body: strings.Repeat("b", 4096)}},
	} {
		f.Add(archivetest.Tar(f, append(append([]archivetest.Member{}, m...), extra...)))
	}
	f.Add(archivetest.TarWith(f, m, archivetest.Sparse("checkpoint/pages-1.img", 1<<20), nil))
	f.Add(archivetest.TarWith(f, m, archivetest.Sparse("checkpoint/pages-1.img", 1000), m[:1]))
	f.Add(archivetest.TarWith(f, m[:2], archivetest.Sparse("checkpoint/s", 100), archivetest.ChainOut("x", 1, "outside")))

	// One parent for every run: t.TempDir in a fuzz target costs the
	// fuzzing engine far more than the run itself.
	parent := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 64<<10 {
			// Larger inputs only add entries of the same kinds, each a
			// file created and removed.
			return
		}
		base, err := os.MkdirTemp(parent, "run")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(base)
		dir := filepath.Join(base, "dir")
		outside := filepath.Join(base, "outside")
		for _, d := range []string{dir, outside} {
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(outside, "keep"), []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
		err = Unpack(bytes.NewReader(b), dir, Limits{MaxBytes: 64 << 10, MaxSparseBytes: 8 << 10})

		ents, rerr := os.ReadDir(base)
		if rerr != nil || len(ents) != 2 {
			t.Fatalf("beside the directory: %v %v, want dir and outside", ents, rerr)
		}
		if got, rerr := os.ReadDir(outside); rerr != nil || len(got) != 1 {
			t.Fatalf("outside holds %v %v", got, rerr)
		}
		if c, rerr := os.ReadFile(filepath.Join(outside, "keep")); rerr != nil || string(c) != "keep" {
			t.Fatalf("outside/keep: %q %v", c, rerr)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error not wrapping ErrInvalid: %v", err)
			}
			if got, rerr := os.ReadDir(dir); rerr != nil || len(got) != 0 {
				t.Fatalf("Unpack failed (%v) and left %v %v", err, got, rerr)
			}
			return
		}
		realDir, rerr := filepath.EvalSymlinks(dir)
		if rerr != nil {
			t.Fatal(rerr)
		}
		werr := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.Type()&fs.ModeSymlink == 0 {
				if !d.IsDir() && !d.Type().IsRegular() {
					t.Errorf("%s is a %v", p, d.Type())
				}
				return nil
			}
			// Follow it as the kernel would; a link to a name the
			// archive does not have resolves to nothing, which is fine.
			res, err := filepath.EvalSymlinks(p)
			if err != nil {
				return nil
			}
			if res != realDir && !strings.HasPrefix(res, realDir+"/") {
				t.Errorf("symlink %s leads to %s, outside %s", p, res, realDir)
			}
			return nil
		})
		if werr != nil {
			t.Fatal(werr)
		}
	})
}
