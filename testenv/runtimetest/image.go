package runtimetest

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Image references of the test images. They are fully qualified so that
// containerd's CRI (which normalizes short names to docker.io/library/...)
// and podman resolve them to the same local image without a registry.
const (
	BusyboxImage = "localhost/nodeshim/busybox:test"
	PauseImage   = "localhost/nodeshim/pause:test"
)

// Media types and annotations of the OCI image layout (image-spec v1.1).
// image-spec is not in nodeshim's module graph; the few fields written here
// are spelled out instead.
const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
	// annotationRefName names the image in an OCI layout (podman load).
	annotationRefName = "org.opencontainers.image.ref.name"
	// annotationContainerdName is what `ctr images import` names the image
	// after; without it the import stores only unnamed content.
	annotationContainerdName = "io.containerd.image.name"
)

// pauseSource is the sandbox (pause) process: single-threaded, so that CRIU
// can restore a container sharing its PID namespace (a multi-threaded pause
// makes restore fail with "Can't fork ... File exists"); it reaps the
// zombies of a shared PID namespace and exits on SIGINT/SIGTERM, as
// Kubernetes' pause does.
const pauseSource = `#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

static void down(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }

int main(void) {
	struct sigaction sa = {0};
	sa.sa_handler = down;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sa.sa_handler = reap;
	sa.sa_flags = SA_NOCLDSTOP;
	sigaction(SIGCHLD, &sa, NULL);
	for (;;) pause();
}
`

// Images are the test images, built once into OCI image layout tars.
type Images struct {
	// Busybox is the OCI tar of BusyboxImage: /bin/busybox (static) and a
	// link for each of its applets, /tmp, /etc/passwd and /etc/group; its
	// command is `sh`.
	Busybox string
	// Pause is the OCI tar of PauseImage: a static single-threaded pause
	// built with gcc -static from pauseSource.
	Pause string
}

// file is one entry of a layer.
type file struct {
	name     string // relative, no leading slash
	mode     int64  // permission bits
	typ      byte   // tar.TypeReg, TypeDir or TypeSymlink
	data     []byte
	linkname string
}

// BuildImages writes the busybox and pause image tars into dir. busybox is
// the path of a statically linked busybox, cc a C compiler that links
// statically (gcc with libc6-dev). The tars are deterministic: the same
// inputs give the same digests.
func BuildImages(dir, busybox, cc string) (*Images, error) {
	if err := requireStatic(busybox); err != nil {
		return nil, err
	}
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return nil, fmt.Errorf("busybox image: %w", err)
	}
	list, err := exec.Command(busybox, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox image: %s --list-full: %w", busybox, err)
	}
	files := append(baseFiles(), file{name: "bin/busybox", mode: 0o755, typ: tar.TypeReg, data: bb})
	for _, applet := range strings.Fields(string(list)) {
		if applet == "bin/busybox" {
			continue
		}
		// Absolute links resolve inside the container's root.
		files = append(files, file{name: applet, mode: 0o777, typ: tar.TypeSymlink, linkname: "/bin/busybox"})
	}
	img := &Images{Busybox: filepath.Join(dir, "busybox.oci.tar"), Pause: filepath.Join(dir, "pause.oci.tar")}
	if err := writeImage(img.Busybox, BusyboxImage, files, []string{"sh"}); err != nil {
		return nil, err
	}

	pause, err := compilePause(dir, cc)
	if err != nil {
		return nil, err
	}
	pauseFiles := append(baseFiles(), file{name: "pause", mode: 0o755, typ: tar.TypeReg, data: pause})
	if err := writeImage(img.Pause, PauseImage, pauseFiles, []string{"/pause"}); err != nil {
		return nil, err
	}
	return img, nil
}

// baseFiles are the directories and files every test image has.
func baseFiles() []file {
	dirs := []string{"bin", "dev", "etc", "proc", "root", "sbin", "sys", "usr", "usr/bin", "usr/sbin", "var"}
	var fs []file
	for _, d := range dirs {
		fs = append(fs, file{name: d, mode: 0o755, typ: tar.TypeDir})
	}
	return append(fs,
		file{name: "tmp", mode: 0o1777, typ: tar.TypeDir},
		file{name: "etc/passwd", mode: 0o644, typ: tar.TypeReg, data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")},
		file{name: "etc/group", mode: 0o644, typ: tar.TypeReg, data: []byte("root:x:0:\nnogroup:x:65534:\n")},
	)
}

// requireStatic fails unless path is an ELF executable without an
// interpreter: a dynamic busybox (Debian's `busybox` package rather than
// `busybox-static`) would not run in an image that has no libc.
func requireStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("busybox image: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("busybox image: %s is dynamically linked (install busybox-static): %w", path, errNotStatic)
		}
	}
	return nil
}

var errNotStatic = errors.New("not a static executable")

// compilePause builds pauseSource with cc -static and returns the binary.
func compilePause(dir, cc string) ([]byte, error) {
	src := filepath.Join(dir, "pause.c")
	bin := filepath.Join(dir, "pause")
	if err := os.WriteFile(src, []byte(pauseSource), 0o644); err != nil {
		return nil, fmt.Errorf("pause image: %w", err)
	}
	out, err := exec.Command(cc, "-static", "-Os", "-s", "-o", bin, src).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("pause image: %s -static: %w: %s", cc, err, bytes.TrimSpace(out))
	}
	if err := requireStatic(bin); err != nil {
		return nil, fmt.Errorf("pause image: %w", err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("pause image: %w", err)
	}
	return data, nil
}

// epoch is the modification time of every entry, for reproducible digests.
var epoch = time.Unix(0, 0).UTC()

// layerTar returns an uncompressed layer holding files, sorted by name.
func layerTar(files []file) ([]byte, error) {
	sorted := append([]file(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].name < sorted[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range sorted {
		h := &tar.Header{Name: f.name, Mode: f.mode, Typeflag: f.typ, ModTime: epoch, Linkname: f.linkname, Format: tar.FormatPAX}
		if f.typ == tar.TypeDir {
			h.Name += "/"
		}
		if f.typ == tar.TypeReg {
			h.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer %s: %w", f.name, err)
		}
		if f.typ == tar.TypeReg {
			if _, err := tw.Write(f.data); err != nil {
				return nil, fmt.Errorf("layer %s: %w", f.name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return buf.Bytes(), nil
}

// descriptor is an OCI content descriptor.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

type imageConfig struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       struct {
		Env        []string `json:"Env"`
		Entrypoint []string `json:"Entrypoint,omitempty"`
		Cmd        []string `json:"Cmd"`
		WorkingDir string   `json:"WorkingDir"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ImageFile is one regular file of an image written by WriteImage.
type ImageFile struct {
	// Name is the path in the image, without a leading slash.
	Name string
	// Mode is the permission bits.
	Mode int64
	// Data is the content.
	Data []byte
}

// WriteImage writes an OCI image layout tar to path: one layer with the
// directories and files every test image has (see Images) and files, named
// ref, with entrypoint and cmd as the image's Entrypoint and Cmd. Parent
// directories of files that are not in the base are added.
func WriteImage(path, ref string, files []ImageFile, entrypoint, cmd []string) error {
	all := baseFiles()
	have := map[string]bool{}
	for _, f := range all {
		have[f.name] = true
	}
	for _, f := range files {
		for d := filepath.Dir(f.Name); d != "." && d != "/" && !have[d]; d = filepath.Dir(d) {
			have[d] = true
			all = append(all, file{name: d, mode: 0o755, typ: tar.TypeDir})
		}
		all = append(all, file{name: f.Name, mode: f.Mode, typ: tar.TypeReg, data: f.Data})
	}
	return writeImageEntry(path, ref, all, entrypoint, cmd)
}

// writeImage writes an OCI image layout tar of one layer with files, named
// ref both for containerd (io.containerd.image.name) and for podman
// (org.opencontainers.image.ref.name), to path.
func writeImage(path, ref string, files []file, cmd []string) error {
	return writeImageEntry(path, ref, files, nil, cmd)
}

func writeImageEntry(path, ref string, files []file, entrypoint, cmd []string) error {
	layer, err := layerTar(files)
	if err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	var cfg imageConfig
	cfg.Architecture = runtime.GOARCH
	cfg.OS = "linux"
	cfg.Config.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cfg.Config.Entrypoint = entrypoint
	cfg.Config.Cmd = cmd
	cfg.Config.WorkingDir = "/"
	cfg.RootFS.Type = "layers"
	cfg.RootFS.DiffIDs = []string{digestOf(layer)}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	man := manifest{
		SchemaVersion: 2,
		MediaType:     mediaTypeManifest,
		Config:        descriptor{MediaType: mediaTypeConfig, Digest: digestOf(cfgJSON), Size: int64(len(cfgJSON))},
		Layers:        []descriptor{{MediaType: mediaTypeLayer, Digest: digestOf(layer), Size: int64(len(layer))}},
	}
	manJSON, err := json.Marshal(man)
	if err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	idx := index{SchemaVersion: 2, MediaType: mediaTypeIndex, Manifests: []descriptor{{
		MediaType: mediaTypeManifest,
		Digest:    digestOf(manJSON),
		Size:      int64(len(manJSON)),
		Annotations: map[string]string{
			annotationContainerdName: ref,
			annotationRefName:        ref,
		},
		Platform: &platform{Architecture: runtime.GOARCH, OS: "linux"},
	}}}
	idxJSON, err := json.Marshal(idx)
	if err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	entries := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", idxJSON},
		{blobPath(digestOf(cfgJSON)), cfgJSON},
		{blobPath(digestOf(layer)), layer},
		{blobPath(digestOf(manJSON)), manJSON},
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Mode: 0o755, Typeflag: tar.TypeDir, ModTime: epoch}); err != nil {
			return fmt.Errorf("image %s: %w", ref, err)
		}
	}
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(e.data)), ModTime: epoch}); err != nil {
			return fmt.Errorf("image %s: %w", ref, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return fmt.Errorf("image %s: %w", ref, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	return nil
}

func blobPath(digest string) string {
	return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:")
}
