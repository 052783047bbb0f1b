package checkpoint

import (
	"archive/tar"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/criu/archive"
	"github.com/nodeshim/nodeshim/criu/archive/archivetest"
	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// TestRestoreContainerdRefusesHostileValues: values of a containerd
// archive that RestoreContainerd passes to ctr and runc (the image
// reference, the container's name, which names the bundle, and the
// spec's hooks) are checked before either runs: an image reference that
// is a flag of ctr never reaches ctr, and nothing is left in the restore
// directory. ctr here records that it ran; it must not.
func TestRestoreContainerdRefusesHostileValues(t *testing.T) {
	const spec = `{"ociVersion":"1.0.2","root":{"path":"rootfs"},"process":{"args":["sh"],"cwd":"/"},"linux":{},` +
		`"annotations":{"io.kubernetes.cri.container-type":"container"}%s}`
	for _, tc := range []struct {
		name, config, hooks, wantErr string
	}{
		{"image reference that is a flag", `{"name":"c","runtime":"io.containerd.runc.v2","rootfsImageRef":"--address=/run/evil.sock"}`, "", "rootfsImageRef"},
		{"image name that is a flag", `{"name":"c","rootfsImageName":"--namespace=other"}`, "", "rootfsImageName"},
		{"container name that is a path", `{"name":"../../../../etc/x","rootfsImageRef":"localhost/app:1"}`, "", "name"},
		{"spec with hooks", `{"name":"c","rootfsImageRef":"localhost/app:1"}`, `,"hooks":{"prestart":[{"path":"/bin/sh","args":["sh","-c","touch /pwned"]}]}`, "hooks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ran := filepath.Join(dir, "ctr-ran")
			fakeCtr := filepath.Join(dir, "ctr")
			if err := os.WriteFile(fakeCtr, []byte("#!/bin/sh\necho \"$@\" > "+ran+"\nexit 1\n"), 0o700); err != nil {
				t.Fatal(err)
			}
			ms := archivetest.Minimal(tc.config, strings.Replace(spec, "%s", tc.hooks, 1))
			ms = append(ms, archivetest.Member{Name: archive.RootfsDiffTar, Type: tar.TypeReg, Body: ""})
			path := filepath.Join(dir, "a.tar")
			if err := os.WriteFile(path, archivetest.Tar(t, ms), 0o600); err != nil {
				t.Fatal(err)
			}
			restoreDir := filepath.Join(dir, "restored")
			_, err := RestoreContainerd(t.Context(), path, RestoreOptions{Ctr: fakeCtr, Runc: "/nonexistent/runc", Dir: restoreDir})
			if !errors.Is(err, archive.ErrInvalid) || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("RestoreContainerd: %v, want ErrInvalid naming %s", err, tc.wantErr)
			}
			if b, err := os.ReadFile(ran); err == nil {
				t.Fatalf("ctr ran with %q", b)
			}
			if ents, _ := os.ReadDir(restoreDir); len(ents) != 0 {
				t.Fatalf("the restore left %v", ents)
			}
			if _, err := os.Stat(filepath.Join(dir, "..", "etc")); err == nil {
				t.Fatal("a bundle was made outside the restore directory")
			}
		})
	}
}
