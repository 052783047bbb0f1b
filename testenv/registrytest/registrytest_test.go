package registrytest

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestPushSPOCAndSign starts the registry, pushes an artifact as spoc push
// does and signs it as cosign does, and reads both back over the
// distribution API: the manifest is spoc's (artifact type, empty config,
// titled layer) and the signature is under cosign's tag.
func TestPushSPOCAndSign(t *testing.T) {
	r := Start(t)
	desc := r.PushSPOC(t, "profiles/app", "v1", Layer{Title: "profile.yaml", Data: []byte("kind: SeccompProfile\n")})
	key, _ := NewKey(t)
	r.Sign(t, "profiles/app", desc.Digest, key)

	get := func(path string) (*http.Response, []byte) {
		req, err := http.NewRequest(http.MethodGet, "http://"+r.Host+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", ocispec.MediaTypeImageManifest)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s: %s", path, resp.Status, data)
		}
		return resp, data
	}
	resp, data := get("/v2/profiles/app/manifests/v1")
	if got := resp.Header.Get("Docker-Content-Digest"); got != desc.Digest.String() {
		t.Errorf("tag v1 is %s, pushed %s", got, desc.Digest)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if m.ArtifactType != "application/vnd.unknown.config.v1+json" || m.Config.MediaType != ocispec.MediaTypeEmptyJSON ||
		len(m.Layers) != 1 || m.Layers[0].Annotations[ocispec.AnnotationTitle] != "profile.yaml" || m.Layers[0].MediaType != ocispec.MediaTypeImageLayer {
		t.Errorf("not spoc's manifest: %s", data)
	}
	_, data = get("/v2/profiles/app/manifests/sha256-" + desc.Digest.Encoded() + ".sig")
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Layers) != 1 || m.Layers[0].MediaType != "application/vnd.dev.cosign.simplesigning.v1+json" || m.Layers[0].Annotations["dev.cosignproject.cosign/signature"] == "" {
		t.Errorf("not cosign's signature manifest: %s", data)
	}
	_, payload := get("/v2/profiles/app/blobs/" + m.Layers[0].Digest.String())
	if string(payload) != string(Payload(r.Host+"/profiles/app", desc.Digest)) {
		t.Errorf("payload %s", payload)
	}
}
