package restore

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"filippo.io/age"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/nodeshim/nodeshim/criu/archive"
	"github.com/nodeshim/nodeshim/criu/archive/archivetest"
	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/runtimes/restoring"
)

// CoreImage is a CRIU core image of one task of machine a, with a
// thread_info-like field before mtype to be skipped.
func CoreImage(a Arch, set bool) []byte {
	var entry []byte
	entry = protowire.AppendTag(entry, 9, protowire.BytesType)
	entry = protowire.AppendBytes(entry, []byte("tc"))
	entry = protowire.AppendTag(entry, 1, protowire.VarintType)
	entry = protowire.AppendVarint(entry, uint64(a))
	var b []byte
	if set {
		b = binary.LittleEndian.AppendUint32(b, imgCommonMagic)
	}
	b = binary.LittleEndian.AppendUint32(b, coreMagic)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(entry)))
	return append(b, entry...)
}

func TestCoreArch(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want Arch
		err  bool
	}{
		{"x86_64 with set magic", CoreImage(ArchX86_64, true), ArchX86_64, false},
		{"aarch64 without set magic", CoreImage(ArchAARCH64, false), ArchAARCH64, false},
		{"empty", nil, 0, true},
		{"another image's magic", binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, imgCommonMagic), 0x12345678), 0, true},
		{"entry longer than the file", CoreImage(ArchX86_64, true)[:14], 0, true},
		{"no mtype", binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, coreMagic), 0), 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CoreArch(tc.b)
			if tc.err {
				if !errors.Is(err, ErrImage) {
					t.Fatalf("CoreArch = %v, %v; want ErrImage", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("CoreArch = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	if ArchOfGOARCH(runtime.GOARCH) == ArchUnknown {
		t.Errorf("GOARCH %s has no CRIU machine type", runtime.GOARCH)
	}
}

func FuzzCoreArch(f *testing.F) {
	f.Add(CoreImage(ArchX86_64, true))
	f.Add(CoreImage(ArchAARCH64, false))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = CoreArch(b)
	})
}

func TestVersions(t *testing.T) {
	if v := DumpVersion([]byte("(00.000000) Version: 4.1.1 (gitid 0)\n(00.0001) Running on node")); v != "4.1.1" {
		t.Errorf("DumpVersion = %q", v)
	}
	if v := DumpVersion([]byte("no version here")); v != "" {
		t.Errorf("DumpVersion = %q", v)
	}
	for _, tc := range []struct {
		a, b string
		want int
	}{{"4.1.1", "4.1.1", 0}, {"4.1", "4.1.0", 0}, {"4.2", "4.1.9", 1}, {"3.17.1", "4.1", -1}, {"10.0", "9.9", 1}} {
		if got := CompareVersions(tc.a, tc.b); got != tc.want {
			t.Errorf("CompareVersions(%s, %s) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestCachedCriuVersion(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "criu")
	// A CRIU that answers once: the second answer must come from the cache.
	script := "#!/bin/sh\nif [ -e " + dir + "/asked ]; then exit 1; fi\ntouch " + dir + "/asked\necho 'Version: 4.1.1'\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "work")
	for i := 0; i < 2; i++ {
		if v := CachedCriuVersion(bin, work); v != "4.1.1" {
			t.Fatalf("call %d: CachedCriuVersion = %q", i, v)
		}
	}
	// Another binary at the same path is asked again.
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho 'Version: 4.2'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(bin, time.Now(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if v := CachedCriuVersion(bin, work); v != "4.2" {
		t.Fatalf("after the binary changed: %q", v)
	}
	if v := CachedCriuVersion(filepath.Join(dir, "missing"), work); v != "" {
		t.Fatalf("a missing CRIU: %q", v)
	}
}

// TestSweepWorkDir: what a killed restore left (old, unlocked) goes; a
// running restore's directory (locked), a fresh one and the version
// cache stay.
func TestSweepWorkDir(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-time.Hour)
	for _, d := range []string{"stale-1", "live-2", "fresh-3", ".criu-version"} {
		p := filepath.Join(dir, d)
		if d == ".criu-version" {
			if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		} else if err := os.MkdirAll(filepath.Join(p, "archive"), 0o700); err != nil {
			t.Fatal(err)
		}
		if d != "fresh-3" {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	l, err := lockDir(filepath.Join(dir, "live-2"), false)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	SweepWorkDir(dir, time.Now())
	var got []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if strings.Join(got, " ") != ".criu-version fresh-3 live-2" {
		t.Errorf("after the sweep %s holds %q, want the version cache, the fresh and the live directories", dir, got)
	}
}

func FuzzDumpVersion(f *testing.F) {
	f.Add([]byte("Version: 4.1.1 (gitid 0)"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if v := DumpVersion(b); v != "" {
			_ = CompareVersions(v, "4.1")
		}
	})
}

func TestNormalizeImage(t *testing.T) {
	for in, want := range map[string]string{
		"busybox":                         "docker.io/library/busybox:latest",
		"busybox:1.36":                    "docker.io/library/busybox:1.36",
		"docker.io/library/busybox:1.36":  "docker.io/library/busybox:1.36",
		"user/app":                        "docker.io/user/app:latest",
		"localhost/nodeshim/busybox:test": "localhost/nodeshim/busybox:test",
		"registry:5000/app":               "registry:5000/app:latest",
		"quay.io/a/b@sha256:00":           "quay.io/a/b@sha256:00",
	} {
		if got := NormalizeImage(in); got != want {
			t.Errorf("NormalizeImage(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestOpenCheckpointRefusesOutside: a Pod's annotation names a file, or a
// pod checkpoint's archive of the container, under the checkpoint
// directory, or nothing; every way out is refused.
func TestOpenCheckpointRefusesOutside(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "checkpoints")
	outside := filepath.Join(base, "secret.tar")
	for _, p := range []string{filepath.Join(dir, "sub")} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{outside, filepath.Join(dir, "ok.tar"), filepath.Join(dir, "sub", "ok.tar")} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range map[string]string{"abs-link.tar": outside, "rel-link.tar": "../secret.tar", "dir-link": base, "in-link.tar": "ok.tar"} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.tar"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Pod checkpoints (criu/pod): a manifest naming an archive per
	// container. In "pod" both are files; in "pod-links" the archive is a
	// symlink out of the checkpoint directory; in "pod-manifest-link" the
	// manifest is.
	manifest, err := os.ReadFile("../../../criu/pod/testdata/manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	const appArchive = "checkpoint-web-0_default-app-2026-11-28T03:30:00Z.tar"
	for _, d := range []string{"pod", "pod-links", "pod-manifest-link"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for p, body := range map[string][]byte{"pod/manifest.json": manifest, "pod/" + appArchive: []byte("x"), "pod-links/manifest.json": manifest} {
		if err := os.WriteFile(filepath.Join(dir, p), body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "manifest.json"), manifest, 0o600); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"pod-links/" + appArchive: outside, "pod-manifest-link/manifest.json": filepath.Join(base, "manifest.json")} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		value string
		ok    bool
		ctr   string // "" is "app"
	}{
		{"pod", true, ""},
		{filepath.Join(dir, "pod"), true, ""},
		{"pod", false, "sidecar"}, // named in the manifest, its archive missing
		{"pod", false, "other"},
		{"pod-manifest-link", false, "setup"},
		{"pod-links", false, ""},
		{"pod-manifest-link", false, ""},
		{"ok.tar", true, ""},
		{"sub/ok.tar", true, ""},
		{filepath.Join(dir, "ok.tar"), true, ""},
		{"in-link.tar", true, ""},
		{"", false, ""},
		{outside, false, ""},
		{"/etc/passwd", false, ""},
		{"../secret.tar", false, ""},
		{"sub/../../secret.tar", false, ""},
		{dir + "/../secret.tar", false, ""},
		{"abs-link.tar", false, ""},
		{"rel-link.tar", false, ""},
		{"dir-link/secret.tar", false, ""},
		{"fifo.tar", false, ""},
		{"sub", false, ""},
		{"missing.tar", false, ""},
		{"/proc/self/root/etc/passwd", false, ""},
	} {
		if tc.ctr == "" {
			tc.ctr = "app"
		}
		t.Run(tc.value+"/"+tc.ctr, func(t *testing.T) {
			f, _, _, err := OpenCheckpoint(dir, tc.value, tc.ctr)
			if errors.Is(err, ErrFinishedInit) {
				t.Fatalf("OpenCheckpoint(%q, %q) = %v, for a container that is no finished init container", tc.value, tc.ctr, err)
			}
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				f.Close()
				return
			}
			if err == nil {
				f.Close()
				t.Fatalf("OpenCheckpoint(%q) opened it", tc.value)
			}
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("OpenCheckpoint(%q) = %v, want ErrRefused", tc.value, err)
			}
		})
	}
}

// specFor is the OCI spec containerd writes for container name of image,
// naming a checkpoint.
func specFor(name, image string) *specs.Spec {
	return &specs.Spec{Annotations: map[string]string{
		"io.kubernetes.cri.container-type": "container",
		"io.kubernetes.cri.container-name": name,
		"io.kubernetes.cri.image-name":     image,
		restoring.AnnotationCheckpoint:     "x.tar",
	}, Root: &specs.Root{Path: "rootfs"}}
}

// Archive is a test-built archive of container name from image: the
// metadata as nodeshim writes it, a core image of machine a, and a
// dump.log of CRIU version criu ("" for none).
func Archive(t testing.TB, name, image string, a Arch, criu string, extra ...archivetest.Member) []byte {
	config := fmt.Sprintf(`{"id":"0123abcd","name":%q,"rootfsImageName":%q,"runtime":"runc"}`, name, image)
	spec := fmt.Sprintf(`{"ociVersion":"1.2.0","annotations":{"io.kubernetes.cri.container-type":"container","io.kubernetes.cri.container-name":%q}}`, name)
	ms := append(archivetest.Minimal(config, spec), archivetest.Member{Name: "checkpoint/core-1.img", Type: tar.TypeReg, Body: string(CoreImage(a, true))})
	if criu != "" {
		ms = append(ms, archivetest.Member{Name: archive.DumpLog, Type: tar.TypeReg, Body: "(00.000000) Version: " + criu + " (gitid 0)\n"})
	}
	return archivetest.Tar(t, append(ms, extra...))
}

// TestRunRefuses: each archive the node cannot honour is refused, naming
// why, before the runtime runs, and leaves nothing in the work directory
// nor in the container's root.
func TestRunRefuses(t *testing.T) {
	const img = "localhost/nodeshim/busybox:test"
	here := ArchOfGOARCH(runtime.GOARCH)
	other := ArchAARCH64
	if here == ArchAARCH64 {
		other = ArchX86_64
	}
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	zw.Write(make([]byte, 1<<20))
	zw.Close()
	for _, tc := range []struct {
		name    string
		archive []byte
		want    string
		is      error
	}{
		{"another machine", Archive(t, "counter", img, other, ""), "task of machine " + other.String(), ErrRefused},
		{"another container", Archive(t, "other", img, here, ""), `checkpoint is of container "other", this container is "counter"`, ErrRefused},
		{"another image", Archive(t, "counter", "docker.io/library/nginx:1", here, ""), `of image "docker.io/library/nginx:1"`, ErrRefused},
		{"a newer CRIU", Archive(t, "counter", img, here, "99.0"), "CRIU 99.0 dumped the checkpoint", ErrRefused},
		{"no core image", archivetest.Tar(t, archivetest.Minimal(
			`{"name":"counter","rootfsImageName":"`+img+`"}`,
			`{"annotations":{"io.kubernetes.cri.container-type":"container","io.kubernetes.cri.container-name":"counter"}}`)), "no checkpoint/core-*.img", ErrRefused},
		{"podman's archive", archivetest.Tar(t, archivetest.Minimal(`{"name":"counter"}`, `{"annotations":{"io.container.manager":"libpod"}}`)), `engine "podman"`, ErrUnsupported},
		{"a symlink out of the archive", Archive(t, "counter", img, here, "", archivetest.Member{Name: "checkpoint/x", Type: tar.TypeSymlink, Link: "/etc/passwd"}), "", archive.ErrInvalid},
		{"a rootfs diff that expands beyond the bound", Archive(t, "counter", img, here, "", archivetest.Member{Name: archive.RootfsDiffTar, Type: tar.TypeReg, Body: bomb.String()}), "expands to more than", archive.ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			ckpt, work, bundle := filepath.Join(base, "ckpt"), filepath.Join(base, "work"), filepath.Join(base, "bundle")
			for _, d := range []string{ckpt, filepath.Join(bundle, "rootfs")} {
				if err := os.MkdirAll(d, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(ckpt, "x.tar"), tc.archive, 0o600); err != nil {
				t.Fatal(err)
			}
			r := &Restore{
				Config:  restoring.Config{CheckpointDir: ckpt, WorkDir: work, MaxBytes: 64 << 10},
				Runtime: "/nonexistent/runc", Call: restoring.Call{Command: "create", Bundle: bundle, ID: "abc"},
				Spec: specFor("counter", img), Checkpoint: "x.tar", Arch: here, CriuVersion: func() string { return "4.1.1" },
			}
			_, err := r.Run()
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v; want %v naming %q", err, tc.is, tc.want)
			}
			t.Log(err)
			for _, d := range []string{work, filepath.Join(bundle, "rootfs")} {
				ents, _ := os.ReadDir(d)
				if len(ents) > 0 {
					t.Errorf("%s keeps %s after the refusal", d, ents[0].Name())
				}
			}
		})
	}
}

// TestRunRefusesSealed: under the config's trust policy and identities,
// an encrypted archive without a matching identity, an unsigned archive
// and a trust policy that does not load are refused, naming why, before
// anything is validated or unpacked.
func TestRunRefusesSealed(t *testing.T) {
	const img = "localhost/nodeshim/busybox:test"
	here := ArchOfGOARCH(runtime.GOARCH)
	plain := Archive(t, "counter", img, here, "")
	keys := t.TempDir()
	ids := make([]*age.X25519Identity, 2)
	for i := range ids {
		id, err := age.GenerateX25519Identity()
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	other := filepath.Join(keys, "other.agekey")
	policy := filepath.Join(keys, "trust.json")
	for p, b := range map[string]string{other: ids[1].String() + "\n", policy: `{"keys":[{"keyID":"sha256:0000000000000000000000000000000000000000000000000000000000000000"}]}`} {
		if err := os.WriteFile(p, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var enc bytes.Buffer
	w, err := seal.NewWriter(&enc, seal.WriteOptions{Recipients: []age.Recipient{ids[0].Recipient()}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(plain); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		archive []byte
		config  restoring.Config
		want    string
		is      error
	}{
		{"encrypted, no identity", enc.Bytes(), restoring.Config{}, "x.tar is encrypted and no age identity is configured", seal.ErrNoIdentity},
		{"encrypted to another node", enc.Bytes(), restoring.Config{Identities: []string{other}}, "none of the 1 configured age identities is a recipient", seal.ErrNoIdentity},
		{"unsigned under a trust policy", plain, restoring.Config{TrustPolicy: policy}, "x.tar: unsigned", seal.ErrUntrusted},
		{"a trust policy that does not load", plain, restoring.Config{TrustPolicy: filepath.Join(keys, "missing.json")}, "missing.json", restoring.ErrConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			ckpt, work, bundle := filepath.Join(base, "ckpt"), filepath.Join(base, "work"), filepath.Join(base, "bundle")
			for _, d := range []string{ckpt, filepath.Join(bundle, "rootfs")} {
				if err := os.MkdirAll(d, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(ckpt, "x.tar"), tc.archive, 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := tc.config
			cfg.CheckpointDir, cfg.WorkDir = ckpt, work
			r := &Restore{
				Config: cfg, Runtime: "/nonexistent/runc", Call: restoring.Call{Command: "create", Bundle: bundle, ID: "abc"},
				Spec: specFor("counter", img), Checkpoint: "x.tar", Arch: here, CriuVersion: func() string { return "4.1.1" },
			}
			_, err := r.Run()
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v; want %v naming %q", err, tc.is, tc.want)
			}
			t.Log(err)
			if _, err := os.Stat(work); err == nil {
				t.Errorf("the work directory %s was created before the refusal", work)
			}
		})
	}
}

// TestOpenCheckpointFinishedInit: an init container that had finished in
// the pod checkpoint (the manifest's "setup", exit code 0) is not
// restored: OpenCheckpoint opens nothing and says it runs again, naming
// the manifest; one that failed is refused as a container the checkpoint
// does not have.
func TestOpenCheckpointFinishedInit(t *testing.T) {
	dir := t.TempDir()
	manifest, err := os.ReadFile("../../../criu/pod/testdata/manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	for d, body := range map[string][]byte{"done": manifest, "failed": bytes.Replace(manifest, []byte(`"exitCode": 0`), []byte(`"exitCode": 1`), 1)} {
		if !bytes.Contains(body, []byte(`"setup"`)) || (d == "failed" && bytes.Equal(body, manifest)) {
			t.Fatalf("the test manifest has no init container setup to change")
		}
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, d, "manifest.json"), body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f, name, _, err := OpenCheckpoint(dir, "done", "setup")
	if f != nil || !errors.Is(err, ErrFinishedInit) || name != filepath.Join(dir, "done", "manifest.json") {
		t.Fatalf("OpenCheckpoint(done, setup) = %v, %q, %v; want no file, the manifest, ErrFinishedInit", f, name, err)
	}
	if _, _, _, err := OpenCheckpoint(dir, "failed", "setup"); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), `has no container "setup"`) {
		t.Fatalf("OpenCheckpoint(failed, setup) = %v; want ErrRefused", err)
	}
}
