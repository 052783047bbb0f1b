package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/criu/archive"
	"github.com/nodeshim/nodeshim/criu/archive/archivetest"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestWriteRefusesHostileArchives: `checkpoint image` refuses, before it
// writes a byte, an archive that claims more than it holds (a sparse
// member of 4 GiB) and one whose metadata would put values outside their
// grammar into the image's annotations or into the status.dump a runtime
// restores from.
func TestWriteRefusesHostileArchives(t *testing.T) {
	const spec = `{"annotations":{}}`
	min := func(config string) []archivetest.Member { return archivetest.Minimal(config, spec) }
	for _, tc := range []struct {
		name    string
		archive func(t *testing.T) []byte
		ref     string
		wantErr string
	}{
		{"sparse member of 4 GiB", func(t *testing.T) []byte {
			return archivetest.TarWith(t, min(`{"name":"c"}`), archivetest.Sparse("checkpoint/pages-1.img", 4<<30), nil)
		}, "localhost/c:1", `entry "checkpoint/pages-1.img" is sparse and expands to 4294967296 bytes`},
		{"image reference that is a flag", func(t *testing.T) []byte {
			return archivetest.Tar(t, min(`{"name":"c","rootfsImageRef":"--address=/run/evil.sock"}`))
		}, "localhost/c:1", "rootfsImageRef"},
		{"podman image id that is a flag", func(t *testing.T) []byte {
			return archivetest.Tar(t, min(`{"name":"c","rootfsImageID":"-x"}`))
		}, "localhost/c:1", "rootfsImageID"},
		{"container name with a slash", func(t *testing.T) []byte {
			return archivetest.Tar(t, min(`{"name":"a/b"}`))
		}, "localhost/c:1", `name "a/b"`},
		{"status.dump asking for a device", func(t *testing.T) []byte {
			return archivetest.Tar(t, append(min(`{"name":"c"}`), archivetest.Member{Name: archive.StatusDump, Type: tar.TypeReg,
				Body: `{"annotations":{"cdi.k8s.io/x":"../../dev/sda"}}`}))
		}, "localhost/c:1", "cdi.k8s.io/x"},
		{"image name that is a flag", func(t *testing.T) []byte {
			return archivetest.Tar(t, min(`{"name":"c"}`))
		}, "--output=/etc/passwd", "not an image reference"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			_, err := Write(bytes.NewReader(tc.archive(t)), tc.ref, &out)
			if !errors.Is(err, archive.ErrInvalid) || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Write: %v, want ErrInvalid with %q", err, tc.wantErr)
			}
			if out.Len() != 0 {
				t.Errorf("Write wrote %d bytes", out.Len())
			}
		})
	}
}

// TestWriteBoundedByFreeSpace: an image that cannot fit the filesystem
// it is written to (a 1 MiB tmpfs, an archive of 2 MiB) is refused
// before a byte is written.
func TestWriteBoundedByFreeSpace(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m,mode=0700"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	ms := append(archivetest.Minimal(`{"name":"c"}`, `{}`), archivetest.Member{Name: "checkpoint/pages-1.img", Type: tar.TypeReg, Body: strings.Repeat("p", 2<<20)})
	out, err := os.OpenFile(filepath.Join(dir, "image.tar"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	_, err = Write(bytes.NewReader(archivetest.Tar(t, ms)), "localhost/c:1", out)
	if !errors.Is(err, archive.ErrTooLarge) || !strings.Contains(err.Error(), "free") {
		t.Fatalf("Write: %v, want ErrTooLarge naming the free space", err)
	}
	if fi, err := out.Stat(); err != nil || fi.Size() != 0 {
		t.Fatalf("Write wrote %v bytes (%v)", fi.Size(), err)
	}
}
