package image

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"go.uber.org/goleak"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

func TestMain(m *testing.M) {
	if os.Getenv(testworkload.EnvKind) == "count" {
		testworkload.RunCounter(os.Getenv(testworkload.EnvDir), os.Getenv(testworkload.EnvMiB), false)
		return
	}
	goleak.VerifyTestMain(m)
}

// realArchive checkpoints a counter with CRIU and returns the archive.
func realArchive(t *testing.T) string {
	t.Helper()
	testutil.RequireRoot(t)
	bin := criutest.RequireChecked(t)
	pid, _ := testworkload.Start(t, "count", 2)
	tg, err := criu.PIDTarget("/proc", pid, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	res, err := criu.Checkpoint(t.Context(), tg, criu.Options{Binary: bin, ArchiveDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return res.Path
}

func build(t *testing.T, archive, ref string) (Image, []byte) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out bytes.Buffer
	img, err := Write(f, ref, &out)
	if err != nil {
		t.Fatal(err)
	}
	return img, out.Bytes()
}

// TestWriteIsDeterministic: the same archive gives the same bytes and
// digests; the layout's index, manifest, config and layer agree with each
// other and the layer is the archive.
func TestWriteIsDeterministic(t *testing.T) {
	archive := realArchive(t)
	img1, out1 := build(t, archive, "localhost/counter-checkpoint:1")
	img2, out2 := build(t, archive, "localhost/counter-checkpoint:1")
	if !bytes.Equal(out1, out2) || img1.Manifest != img2.Manifest {
		t.Fatalf("two builds differ: %s and %s", img1.Manifest, img2.Manifest)
	}
	raw, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}

	files := tarFiles(t, out1)
	var idx ocispec.Index
	if err := json.Unmarshal(files["index.json"], &idx); err != nil || len(idx.Manifests) != 1 {
		t.Fatalf("index.json: %v %+v", err, idx)
	}
	if d := idx.Manifests[0]; d.Digest != img1.Manifest || d.Annotations[ContainerdImageName] != "localhost/counter-checkpoint:1" {
		t.Errorf("index descriptor %+v", d)
	}
	blob := func(d digest.Digest) []byte {
		b, ok := files["blobs/sha256/"+d.Encoded()]
		if !ok {
			t.Fatalf("no blob %s", d)
		}
		if sum := sha256.Sum256(b); digest.NewDigestFromBytes(digest.SHA256, sum[:]) != d {
			t.Fatalf("blob %s has another digest", d)
		}
		return b
	}
	var man ocispec.Manifest
	if err := json.Unmarshal(blob(img1.Manifest), &man); err != nil {
		t.Fatal(err)
	}
	if len(man.Layers) != 1 || man.Layers[0].Digest != img1.Layer || man.Layers[0].MediaType != ocispec.MediaTypeImageLayer {
		t.Errorf("manifest layers %+v", man.Layers)
	}
	// A nodeshim archive of a process has no node paths in config.dump:
	// the layer holds the archive's entries unchanged.
	if got, want := entries(t, blob(img1.Layer)), entries(t, raw); !maps.Equal(got, want) {
		t.Errorf("the layer's entries differ from the archive's:\n%v\n%v", got, want)
	}
	var cfg ocispec.Image
	if err := json.Unmarshal(blob(man.Config.Digest), &cfg); err != nil || len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != img1.Layer {
		t.Errorf("config %+v: %v", cfg, err)
	}
	for _, k := range []string{PodmanName, PodmanRuntimeName, CRIOName, CRIUName} {
		if man.Annotations[k] == "" {
			t.Errorf("manifest has no %s: %v", k, man.Annotations)
		}
	}
	if _, other := build(t, archive, "localhost/counter-checkpoint:2"); bytes.Equal(other, out1) {
		t.Error("another name gives the same image archive")
	}
}

// entries maps each entry of a tar to the digest of its contents.
func entries(t *testing.T, b []byte) map[string]digest.Digest {
	t.Helper()
	out := map[string]digest.Digest{}
	for name, data := range tarFiles(t, b) {
		out[name] = digest.FromBytes(data)
	}
	return out
}

func TestPortable(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"nodeshim's config.dump unchanged", `{"id":"x", "name":"a"}`, `{"id":"x", "name":"a"}`},
		{"podman's node paths dropped", `{"name":"a","staticDir":"/s","conmonPidFile":"/c","pid_file":"/p","ShmDir":"/m","logPath":"/l","secretsPath":"/x","rootfsImageName":"i"}`,
			`{"name":"a","rootfsImageName":"i"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := portable([]byte(tt.in))
			if err != nil || string(got) != tt.want {
				t.Errorf("portable = %s, %v; want %s", got, err, tt.want)
			}
		})
	}
}

func TestWriteRefusesNonCheckpoints(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "hello", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("hi"))
	_ = tw.Close()
	_, err := Write(bytes.NewReader(buf.Bytes()), "localhost/x:1", io.Discard)
	if !errors.Is(err, ErrNotCheckpoint) {
		t.Errorf("err %v, want ErrNotCheckpoint", err)
	}
}

// BenchmarkWrite builds the checkpoint image of a real archive of a
// counter touching 64 MiB.
func BenchmarkWrite(b *testing.B) {
	testutil.RequireRoot(b)
	bin := criutest.Require(b)
	pid, _ := testworkload.Start(b, "count", 64)
	tg, err := criu.PIDTarget("/proc", pid, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	res, err := criu.Checkpoint(b.Context(), tg, criu.Options{Binary: bin, ArchiveDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(res.Path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	b.SetBytes(res.Size)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Write(f, "localhost/bench:1", io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzPortable(f *testing.F) {
	f.Add([]byte(`{"name":"a","staticDir":"/s","conmonPidFile":"/c"}`))
	f.Add([]byte(`{"id":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := portable(b)
		if err != nil {
			return
		}
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("portable(%q) = %q, not JSON: %v", b, out, err)
		}
		for _, k := range nodePaths {
			if _, ok := m[k]; ok {
				t.Errorf("portable(%q) keeps %s", b, k)
			}
		}
	})
}
