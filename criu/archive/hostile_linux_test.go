package archive

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/criu/archive/archivetest"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

type amember = archivetest.Member

func minimal() []amember { return archivetest.Minimal("{}", "{}") }

// TestSymlinkChains: each symlink of an archive is followed through the
// others, as the kernel follows them, and a chain whose links each stay
// inside the archive but together lead out of it is refused.
func TestSymlinkChains(t *testing.T) {
	for _, tc := range []struct {
		name    string
		links   []amember
		wantErr string
	}{
		{"chain out of the archive", archivetest.ChainOut("checkpoint/out", 1, "etc"), "leads outside the archive"},
		{"chain far out", archivetest.ChainOut("config.link", 8, "etc/passwd"), "leads outside the archive"},
		{"chain through a later link", []amember{
			{Name: "b", Type: tar.TypeSymlink, Link: "checkpoint/a/.."},
			{Name: "checkpoint/a", Type: tar.TypeSymlink, Link: ".."},
		}, "leads outside the archive"},
		{"loop", []amember{
			{Name: "checkpoint/a", Type: tar.TypeSymlink, Link: "b"},
			{Name: "checkpoint/b", Type: tar.TypeSymlink, Link: "a"},
		}, "loops through more than 40 symlinks"},
		{"chain that stays inside", []amember{
			{Name: "checkpoint/a", Type: tar.TypeSymlink, Link: "b"},
			{Name: "checkpoint/b", Type: tar.TypeSymlink, Link: "../config.dump"},
			{Name: "c", Type: tar.TypeSymlink, Link: "checkpoint/a"},
		}, ""},
		{"non-directory over entries under it", []amember{
			{Name: "checkpoint/d/f", Type: tar.TypeReg, Body: "x"},
			{Name: "checkpoint/d", Type: tar.TypeSymlink, Link: "."},
		}, "earlier entries lie under it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := archivetest.Tar(t, append(minimal(), tc.links...))
			_, err := Validate(bytes.NewReader(b))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
			} else if !errors.Is(err, ErrInvalid) || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate: %v, want ErrInvalid with %q", err, tc.wantErr)
			}
			// Unpack, which does not rely on Validate, refuses the same
			// and leaves its directory as it was.
			parent := t.TempDir()
			dir := filepath.Join(parent, "work")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			err = Unpack(bytes.NewReader(b), dir, Limits{})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Unpack refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Unpack: %v, want ErrInvalid with %q", err, tc.wantErr)
			}
			assertEmpty(t, dir)
		})
	}
}

func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("%s holds %v after a failure, want nothing", dir, names)
	}
}

// hostFiles makes, beside the work directory under base, what an
// attacker wants a restore to read: a tar holding "stolen", a
// deleted.files list, and a device node.
func hostFiles(t *testing.T, base string) {
	t.Helper()
	host := filepath.Join(base, "host")
	if err := os.Mkdir(host, 0o700); err != nil {
		t.Fatal(err)
	}
	secret := archivetest.Tar(t, []amember{{Name: "stolen", Type: tar.TypeReg, Body: "host secret"}})
	if err := os.WriteFile(filepath.Join(host, "secret.tar"), secret, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "list.json"), []byte(`["/etc/keep"]`), 0o600); err != nil {
		t.Fatal(err)
	}
	// /dev/null's numbers: reading it gives nothing, so a restore that
	// reads it fails on the JSON, after the read.
	if err := unix.Mknod(filepath.Join(host, "null"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
}

// TestRootfsDiffChainOut: rootfs-diff.tar and deleted.files that are
// chains of symlinks out of the work directory, to a host file or a
// device. Validate and Unpack refuse the archive; ApplyRootfsDiff, given
// such an unpacked directory anyway, opens neither: nothing of the host
// reaches the container's root, and nothing in it is deleted.
func TestRootfsDiffChainOut(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tc := range []struct {
		name   string
		member string
		target string
	}{
		{"rootfs-diff.tar to a host tar", RootfsDiffTar, "host/secret.tar"},
		{"deleted.files to a host file", DeletedFiles, "host/list.json"},
		{"deleted.files to a device", DeletedFiles, "host/null"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			hostFiles(t, base)
			work, rootfs := filepath.Join(base, "work"), filepath.Join(base, "rootfs")
			for _, d := range []string{work, filepath.Join(rootfs, "etc")} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(rootfs, "etc", "keep"), []byte("image"), 0o644); err != nil {
				t.Fatal(err)
			}
			// work's parent is base: one level up, then the target.
			chain := archivetest.ChainOut(tc.member, 1, tc.target)
			b := archivetest.Tar(t, append(minimal(), chain...))
			if _, err := Validate(bytes.NewReader(b)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "leads outside the archive") {
				t.Errorf("Validate: %v, want ErrInvalid, a link leading outside", err)
			}
			if err := Unpack(bytes.NewReader(b), work, Limits{}); !errors.Is(err, ErrInvalid) {
				t.Errorf("Unpack: %v, want ErrInvalid", err)
			}
			assertEmpty(t, work)

			// The unpacked directory as a restore that skipped both
			// would have it.
			for _, m := range chain {
				p := filepath.Join(work, m.Name)
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(m.Link, p); err != nil {
					t.Fatal(err)
				}
			}
			err := ApplyRootfsDiff(work, rootfs, Limits{})
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.member) {
				t.Errorf("ApplyRootfsDiff: %v, want ErrInvalid naming %s", err, tc.member)
			}
			if err != nil && strings.Contains(err.Error(), "JSON") {
				t.Errorf("ApplyRootfsDiff read the file it points to: %v", err)
			}
			if _, err := os.Lstat(filepath.Join(rootfs, "stolen")); err == nil {
				t.Error("a host file was extracted into the container's root")
			}
			if b, err := os.ReadFile(filepath.Join(rootfs, "etc", "keep")); err != nil || string(b) != "image" {
				t.Errorf("etc/keep: %q %v; a host file decided what the restore deleted", b, err)
			}
		})
	}
}

// TestOpenMemberRefusesNonRegular: a member that is a device or a FIFO
// inside the directory is refused without reading or blocking on it.
func TestOpenMemberRefusesNonRegular(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mknod(filepath.Join(dir, "dev"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, name := range []string{"dev", "fifo", "dir"} {
		t.Run(name, func(t *testing.T) {
			f, err := OpenMember(root, name, 1<<20)
			if err == nil {
				f.Close()
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "not a regular file") {
				t.Fatalf("OpenMember(%s): %v, want ErrInvalid, not a regular file", name, err)
			}
		})
	}
}

// TestSparseBomb: a member that claims gigabytes from a few blocks of
// archive (a GNU sparse member of 4 GiB, an archive of 3 KiB) is refused
// by Validate and Unpack before a byte of it is written, naming the
// member and the bound, and Unpack leaves nothing behind.
func TestSparseBomb(t *testing.T) {
	const size = 4 << 30
	b := archivetest.TarWith(t, minimal(), archivetest.Sparse("checkpoint/pages-1.img", size), nil)
	if len(b) > 8<<10 {
		t.Fatalf("the archive has %d bytes", len(b))
	}
	// archive/tar reads it as the attacker meant it to.
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("no sparse member in the archive: %v", err)
		}
		if h.Name == "checkpoint/pages-1.img" {
			if h.Size != size || !isSparse(h) {
				t.Fatalf("sparse member read with size %d, sparse %v", h.Size, isSparse(h))
			}
			break
		}
	}
	check := func(t *testing.T, err error) {
		t.Helper()
		if !errors.Is(err, ErrTooLarge) || !errors.Is(err, ErrInvalid) || !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("%v, want ErrTooLarge", err)
		}
		for _, want := range []string{"checkpoint/pages-1.img", "4294967296", "67108864"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %s", err, want)
			}
		}
	}
	t.Run("Validate", func(t *testing.T) {
		_, err := Validate(bytes.NewReader(b))
		check(t, err)
	})
	t.Run("Unpack", func(t *testing.T) {
		dir := t.TempDir()
		check(t, Unpack(bytes.NewReader(b), dir, Limits{}))
		assertEmpty(t, dir)
	})
	t.Run("sparse members refused outright", func(t *testing.T) {
		small := archivetest.TarWith(t, minimal(), archivetest.Sparse("checkpoint/pages-1.img", 4096), nil)
		if _, err := ValidateLimits(bytes.NewReader(small), Limits{}); err != nil {
			t.Fatalf("a 4 KiB sparse member refused: %v", err)
		}
		if _, err := ValidateLimits(bytes.NewReader(small), Limits{MaxSparseBytes: -1}); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("MaxSparseBytes -1: %v, want ErrTooLarge", err)
		}
	})
}

// TestUnpackBounds: regular members past Limits.MaxBytes, or past the
// free space of the destination (a 1 MiB tmpfs), are refused before they
// are written, and the members already written are removed.
func TestUnpackBounds(t *testing.T) {
	testutil.RequireRoot(t)
	big := strings.Repeat("p", 2<<20)
	b := archivetest.Tar(t, append(minimal(), amember{Name: "checkpoint/pages-1.img", Type: tar.TypeReg, Body: big}))
	t.Run("MaxBytes", func(t *testing.T) {
		dir := t.TempDir()
		err := Unpack(bytes.NewReader(b), dir, Limits{MaxBytes: 1 << 20})
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "checkpoint/pages-1.img") || !strings.Contains(err.Error(), "1048576") {
			t.Fatalf("%v, want ErrTooLarge naming the member and the bound", err)
		}
		assertEmpty(t, dir)
		if _, err := ValidateLimits(bytes.NewReader(b), Limits{MaxBytes: 1 << 20}); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("ValidateLimits: %v, want ErrTooLarge", err)
		}
	})
	t.Run("free space", func(t *testing.T) {
		dir := t.TempDir()
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m,mode=0700"); err != nil {
			t.Fatal(err)
		}
		defer unix.Unmount(dir, unix.MNT_DETACH)
		err := Unpack(bytes.NewReader(b), dir, Limits{})
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "checkpoint/pages-1.img") || !strings.Contains(err.Error(), "free in "+dir) {
			t.Fatalf("%v, want ErrTooLarge naming the member and the free space", err)
		}
		assertEmpty(t, dir)
	})
}
