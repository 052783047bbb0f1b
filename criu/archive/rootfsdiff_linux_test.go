package archive

import (
	"archive/tar"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestWriteRootfsDiff builds an overlay upper directory by hand (a whiteout
// is a 0/0 character device, an opaque directory carries
// trusted.overlay.opaque=y; both need root) and checks what the archive
// members say: the files and directories of the upper directory in the
// tar, the whiteouts and the names an opaque directory hides in
// deleted.files.
func TestWriteRootfsDiff(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	upper, lower, out := filepath.Join(dir, "upper"), filepath.Join(dir, "lower"), filepath.Join(dir, "out")
	for _, d := range []string{upper + "/etc", upper + "/var/cache", lower + "/var/cache", out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, data := range map[string]string{
		upper + "/count":           "42\n",
		upper + "/etc/motd":        "hello",
		upper + "/var/cache/new":   "n",
		lower + "/var/cache/old-a": "a",
		lower + "/var/cache/old-b": "b",
		lower + "/var/cache/new":   "replaced",
	} {
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("motd", upper+"/etc/motd.link"); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(upper+"/etc/shadow", unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(upper+"/var/cache", overlayOpaque, []byte("y"), 0); err != nil {
		testutil.SkipIfNotSupported(t, err)
		t.Fatal(err)
	}
	if err := WriteRootfsDiff(context.Background(), Layer{Upper: upper, Lower: []string{lower}}, out); err != nil {
		t.Fatal(err)
	}

	f, err := os.Open(filepath.Join(out, RootfsDiffTar))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]string{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = string(h.Typeflag) + ":" + string(b) + h.Linkname
	}
	want := map[string]string{
		"count":         "0:42\n",
		"etc/":          "5:",
		"etc/motd":      "0:hello",
		"etc/motd.link": "2:motd",
		"var/":          "5:",
		"var/cache/":    "5:",
		"var/cache/new": "0:n",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("member %q = %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("members %v, want %v", got, want)
	}
	b, err := os.ReadFile(filepath.Join(out, DeletedFiles))
	if err != nil {
		t.Fatal(err)
	}
	var deleted []string
	if err := json.Unmarshal(b, &deleted); err != nil {
		t.Fatal(err)
	}
	slices.Sort(deleted)
	if w := []string{"/etc/shadow", "/var/cache/old-a", "/var/cache/old-b"}; !slices.Equal(deleted, w) {
		t.Errorf("deleted.files = %q, want %q", deleted, w)
	}
	for _, n := range []string{RootfsDiffTar, DeletedFiles} {
		fi, err := os.Stat(filepath.Join(out, n))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", n, fi.Mode().Perm())
		}
	}
	// Nothing is overwritten: a second diff into the same place fails.
	if err := WriteRootfsDiff(context.Background(), Layer{Upper: upper}, out); err == nil {
		t.Error("a second WriteRootfsDiff into the same directory succeeded")
	}
}
