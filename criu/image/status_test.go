package image

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/criu"
)

// archiveOf returns a minimal checkpoint archive: checkpoint/ with an
// inventory, and the files given.
func archiveOf(t testing.TB, files map[string]string, order ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: criu.ImagesDir + "/", Typeflag: tar.TypeDir, Mode: 0o700}); err != nil {
		t.Fatal(err)
	}
	for _, name := range append([]string{criu.ImagesDir + "/inventory.img"}, order...) {
		body := files[name]
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// tarFiles maps each entry of the tar b to its contents.
func tarFiles(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = data
	}
}

// layerFile returns the named file of the image archive's one layer.
func layerFile(t *testing.T, image []byte, name string) ([]byte, bool) {
	t.Helper()
	blobs := tarFiles(t, image)
	var idx ocispec.Index
	if err := json.Unmarshal(blobs[ocispec.ImageIndexFile], &idx); err != nil || len(idx.Manifests) != 1 {
		t.Fatalf("index.json: %v", err)
	}
	var man ocispec.Manifest
	if err := json.Unmarshal(blobs[blobPath(idx.Manifests[0].Digest)], &man); err != nil || len(man.Layers) != 1 {
		t.Fatalf("manifest: %v", err)
	}
	b, ok := tarFiles(t, blobs[blobPath(man.Layers[0].Digest)])[name]
	return b, ok
}

// TestStatusDumpInTheLayer: the layer carries the archive's status.dump
// as it is, or, for an archive without one (podman's), one built from
// config.dump, the same each time.
func TestStatusDumpInTheLayer(t *testing.T) {
	created := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	config := `{"id":"c1","name":"app","pod":"web-0","namespace":"default","rootfsImageName":"localhost/app:1",` +
		`"rootfsImageRef":"sha256:abcd","createdTime":"2025-03-04T05:06:07Z"}`
	own := `{"id":"c1","metadata":{"name":"app","attempt":2}}`
	tests := []struct {
		name  string
		files map[string]string
		order []string
		want  *runtimeapi.ContainerStatus
	}{
		{"the archive's own", map[string]string{criu.ConfigDump: config, criu.SpecDump: "{}", criu.StatusDump: own},
			[]string{criu.ConfigDump, criu.SpecDump, criu.StatusDump},
			&runtimeapi.ContainerStatus{Id: "c1", Metadata: &runtimeapi.ContainerMetadata{Name: "app", Attempt: 2}}},
		{"built from config.dump", map[string]string{criu.ConfigDump: config, criu.SpecDump: "{}"},
			[]string{criu.ConfigDump, criu.SpecDump},
			&runtimeapi.ContainerStatus{Id: "c1", Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
				State: runtimeapi.ContainerState_CONTAINER_RUNNING, CreatedAt: created.UnixNano(), StartedAt: created.UnixNano(),
				Image: &runtimeapi.ImageSpec{Image: "localhost/app:1"}, ImageRef: "sha256:abcd",
				Labels: map[string]string{labelPodName: "web-0", labelPodNamespace: "default", labelContainerName: "app"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			archive := archiveOf(t, tt.files, tt.order...)
			var out1, out2 bytes.Buffer
			if _, err := Write(bytes.NewReader(archive), "localhost/app-checkpoint:1", &out1); err != nil {
				t.Fatal(err)
			}
			if _, err := Write(bytes.NewReader(archive), "localhost/app-checkpoint:1", &out2); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out1.Bytes(), out2.Bytes()) {
				t.Error("two builds of one archive differ")
			}
			b, ok := layerFile(t, out1.Bytes(), criu.StatusDump)
			if !ok {
				t.Fatalf("the layer has no %s", criu.StatusDump)
			}
			var got runtimeapi.ContainerStatus
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("%s %s: %v", criu.StatusDump, b, err)
			}
			if !proto.Equal(&got, tt.want) {
				t.Errorf("%s = %v, want %v", criu.StatusDump, &got, tt.want)
			}
		})
	}
}
