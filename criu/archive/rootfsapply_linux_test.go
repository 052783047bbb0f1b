package archive

import (
	"archive/tar"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

func TestApplyRootfsDiff(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tc := range []struct {
		name    string
		diff    []member
		deleted string
		// check inspects the root after a successful apply.
		check   func(t *testing.T, root string)
		wantErr bool
	}{
		{
			name: "adds-changes-deletes",
			diff: []member{
				{Name: "new/", Type: tar.TypeDir},
				{Name: "new/file", Type: tar.TypeReg, Body: "added"},
				{Name: "etc/motd", Type: tar.TypeReg, Body: "changed"},
				{Name: "link", Type: tar.TypeSymlink, Link: "/new/file"},
			},
			deleted: `["/etc/gone","/olddir"]`,
			check: func(t *testing.T, root string) {
				for p, want := range map[string]string{"new/file": "added", "etc/motd": "changed"} {
					if b, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(b) != want {
						t.Errorf("%s: %q %v, want %q", p, b, err, want)
					}
				}
				if l, err := os.Readlink(filepath.Join(root, "link")); err != nil || l != "/new/file" {
					t.Errorf("link -> %q %v", l, err)
				}
				for _, p := range []string{"etc/gone", "olddir"} {
					if _, err := os.Lstat(filepath.Join(root, p)); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("%s not deleted: %v", p, err)
					}
				}
			},
		},
		{name: "dotdot", diff: []member{{Name: "../escape", Type: tar.TypeReg, Body: "x"}}, wantErr: true},
		{name: "through-symlink", diff: []member{
			{Name: "up", Type: tar.TypeSymlink, Link: "../.."},
			{Name: "up/escape", Type: tar.TypeReg, Body: "x"},
		}, wantErr: true},
		{name: "deleted-dotdot", deleted: `["/../etc"]`, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dir, root := filepath.Join(base, "archive"), filepath.Join(base, "root")
			for _, d := range []string{dir, filepath.Join(root, "etc"), filepath.Join(root, "olddir")} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for _, f := range []string{"etc/motd", "etc/gone", "olddir/x"} {
				if err := os.WriteFile(filepath.Join(root, f), []byte("image"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.diff != nil {
				if err := os.WriteFile(filepath.Join(dir, RootfsDiffTar), makeTar(t, tc.diff), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if tc.deleted != "" {
				if err := os.WriteFile(filepath.Join(dir, DeletedFiles), []byte(tc.deleted), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			err := ApplyRootfsDiff(dir, root, Limits{})
			if _, serr := os.Lstat(filepath.Join(base, "escape")); serr == nil {
				t.Fatal("a member was written outside the root")
			}
			if tc.wantErr {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, root)
		})
	}
}

// FuzzApplyRootfsDiff: whatever rootfs-diff.tar and deleted.files hold,
// nothing is written or removed outside the root.
func FuzzApplyRootfsDiff(f *testing.F) {
	f.Add(makeTar(f, []member{{Name: "a/", Type: tar.TypeDir}, {Name: "a/b", Type: tar.TypeReg, Body: "x"}}), []byte(`["/etc/gone"]`))
	f.Add(makeTar(f, []member{{Name: "up", Type: tar.TypeSymlink, Link: "../.."}, {Name: "up/escape", Type: tar.TypeReg, Body: "x"}}), []byte(`["/../outside"]`))
	f.Fuzz(func(t *testing.T, diff, deleted []byte) {
		base := t.TempDir()
		dir, root := filepath.Join(base, "archive"), filepath.Join(base, "root")
		for _, d := range []string{dir, filepath.Join(root, "etc")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		outside := filepath.Join(base, "outside")
		if err := os.WriteFile(outside, []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, RootfsDiffTar), diff, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, DeletedFiles), deleted, 0o600); err != nil {
			t.Fatal(err)
		}
		_ = ApplyRootfsDiff(dir, root, Limits{})
		ents, err := os.ReadDir(base)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 3 {
			t.Errorf("%d entries beside the root, want archive, outside and root", len(ents))
		}
		if b, err := os.ReadFile(outside); err != nil || string(b) != "keep" {
			t.Errorf("a file outside the root changed: %q %v", b, err)
		}
	})
}
