// Package registrytest runs a real OCI registry for tests, Debian's
// docker-registry (distribution 2.8), on 127.0.0.1 with its storage in the
// test's temporary directory, and writes into it what security-profiles-
// operator's `spoc push` and cosign's `sign --key` write: a profile
// artifact and a simple-signing signature of its manifest. The writers are
// written from those tools' formats, independently of nodeshim's reader
// (shim/profiles/ociprofile), so that a test of the reader checks it
// against the format rather than against itself.
package registrytest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content/memory"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/nodeshim/nodeshim/testenv/testproc"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// Binary is the registry's program, from Debian's docker-registry package.
const Binary = "docker-registry"

// Registry is a running docker-registry.
type Registry struct {
	// Host is its address, 127.0.0.1:port, as an oci:// reference names it.
	Host string
	// Dir holds its storage and log.
	Dir string

	cmd  *exec.Cmd
	done chan error
}

// Start runs docker-registry on a free port of 127.0.0.1 with its storage
// under a temporary directory of t, waits until it answers /v2/, and stops
// it when t ends. The test is gated on the program (testutil.RequireBinary:
// the kernel-matrix guests do not carry it).
func Start(t testing.TB) *Registry {
	t.Helper()
	bin := testutil.RequireBinary(t, Binary)
	dir := t.TempDir()
	// A port taken between the probe and the registry's bind makes it
	// exit; another port is tried.
	var lastErr error
	for range 3 {
		r, err := start(bin, dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.wait(t); err != nil {
			lastErr = err
			continue
		}
		t.Cleanup(func() {
			if err := r.stop(); err != nil {
				t.Errorf("stop docker-registry: %v", err)
			}
		})
		return r
	}
	t.Fatalf("docker-registry did not start: %v", lastErr)
	return nil
}

func start(bin, dir string) (*Registry, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	host := l.Addr().String()
	l.Close()
	storage := filepath.Join(dir, "storage-"+strings.ReplaceAll(host, ":", "-"))
	config := fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, storage, host)
	cfgPath := filepath.Join(dir, "config-"+strings.ReplaceAll(host, ":", "-")+".yml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(dir, "registry.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "serve", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	done, err := testproc.StartHeld(cmd)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	r := &Registry{Host: host, Dir: dir, cmd: cmd, done: make(chan error, 1)}
	go func() { r.done <- <-done }()
	return r, nil
}

// wait polls the API root until the registry answers 200, or returns the
// registry's exit.
func (r *Registry) wait(t testing.TB) error {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	var exited error
	testutil.Eventually(t, "docker-registry answers on "+r.Host, func() error {
		select {
		case err := <-r.done:
			exited = fmt.Errorf("docker-registry on %s exited: %v: %s", r.Host, err, r.Log())
			return nil
		default:
		}
		resp, err := client.Get("http://" + r.Host + "/v2/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /v2/: %s", resp.Status)
		}
		return nil
	})
	if exited != nil {
		r.done <- exited
	}
	return exited
}

func (r *Registry) stop() error {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
		return nil
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
		return errors.New("did not exit on SIGTERM in 10 s; killed")
	}
}

// Log is the tail of the registry's log.
func (r *Registry) Log() string {
	data, _ := os.ReadFile(filepath.Join(r.Dir, "registry.log"))
	if len(data) > 4096 {
		data = data[len(data)-4096:]
	}
	return string(data)
}

// Ref is the oci:// reference of repo:tag (or repo@digest when tag starts
// with "sha256:") in this registry.
func (r *Registry) Ref(repo, tag string) string {
	if strings.HasPrefix(tag, "sha256:") {
		return "oci://" + r.Host + "/" + repo + "@" + tag
	}
	return "oci://" + r.Host + "/" + repo + ":" + tag
}

// Repository is a client of repo in this registry, over plain HTTP.
func (r *Registry) Repository(t testing.TB, repo string) *remote.Repository {
	t.Helper()
	rp, err := remote.NewRepository(r.Host + "/" + repo)
	if err != nil {
		t.Fatal(err)
	}
	rp.PlainHTTP = true
	return rp
}

// Layer is one file of a spoc artifact.
type Layer struct {
	// Title is its file name (profile.yaml, profile-linux-amd64.yaml).
	Title string
	// Platform is set for a platform's profile, as spoc push --platforms
	// sets it.
	Platform *ocispec.Platform
	// Data is the file's content.
	Data []byte
}

// PushSPOC pushes files as `spoc push` does (security-profiles-operator's
// artifact.Push: an oras file store, PackManifest version 1.1 with the
// artifact type application/vnd.unknown.config.v1+json and an empty
// config, each file a layer of oras' default media type with its title)
// and tags the manifest. It returns the manifest's descriptor.
func (r *Registry) PushSPOC(t testing.TB, repo, tag string, files ...Layer) ocispec.Descriptor {
	t.Helper()
	ctx := context.Background()
	store := memory.New()
	var layers []ocispec.Descriptor
	for _, f := range files {
		d := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(f.Data), Size: int64(len(f.Data)),
			Annotations: map[string]string{ocispec.AnnotationTitle: f.Title}, Platform: f.Platform}
		if err := store.Push(ctx, d, bytes.NewReader(f.Data)); err != nil {
			t.Fatal(err)
		}
		layers = append(layers, d)
	}
	m, err := oras.PackManifest(ctx, store, oras.PackManifestVersion1_1, oras.MediaTypeUnknownConfig, oras.PackManifestOptions{Layers: layers})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Tag(ctx, m, tag); err != nil {
		t.Fatal(err)
	}
	if _, err := oras.Copy(ctx, store, tag, r.Repository(t, repo), tag, oras.DefaultCopyOptions); err != nil {
		t.Fatalf("push %s:%s: %v", repo, tag, err)
	}
	return m
}

// PushManifest pushes blobs and then a manifest of any content (a hostile
// one, for a test) under tag; it returns the manifest's digest.
func (r *Registry) PushManifest(t testing.TB, repo, tag string, manifest []byte, blobs ...[]byte) digest.Digest {
	t.Helper()
	ctx := context.Background()
	rp := r.Repository(t, repo)
	for _, b := range blobs {
		if err := rp.Blobs().Push(ctx, ocispec.Descriptor{MediaType: "application/octet-stream", Digest: digest.FromBytes(b), Size: int64(len(b))}, bytes.NewReader(b)); err != nil {
			t.Fatalf("push blob: %v", err)
		}
	}
	var mt struct {
		MediaType string `json:"mediaType"`
	}
	_ = json.Unmarshal(manifest, &mt)
	if mt.MediaType == "" {
		mt.MediaType = ocispec.MediaTypeImageManifest
	}
	d := ocispec.Descriptor{MediaType: mt.MediaType, Digest: digest.FromBytes(manifest), Size: int64(len(manifest))}
	if err := rp.PushReference(ctx, d, bytes.NewReader(manifest), tag); err != nil {
		t.Fatalf("push manifest %s:%s: %v", repo, tag, err)
	}
	return d.Digest
}

// Payload is cosign's simple-signing payload for the manifest named by
// dgst in repository ref (host/repo).
func Payload(ref string, dgst digest.Digest) []byte {
	p := map[string]any{
		"critical": map[string]any{
			"identity": map[string]string{"docker-reference": ref},
			"image":    map[string]string{"docker-manifest-digest": dgst.String()},
			"type":     "cosign container image signature",
		},
		"optional": nil,
	}
	data, _ := json.Marshal(p)
	return data
}

// Sign signs the manifest dgst of repo as `cosign sign --key` does
// (simple signing: the payload's SHA-256 signed with ECDSA, ASN.1,
// base64 in the layer's dev.cosignproject.cosign/signature annotation,
// the signature manifest tagged sha256-<hex>.sig in the same repository).
func (r *Registry) Sign(t testing.TB, repo string, dgst digest.Digest, key *ecdsa.PrivateKey) {
	t.Helper()
	r.SignPayload(t, repo, dgst, Payload(r.Host+"/"+repo, dgst), key)
}

// SignPayload stores a signature of payload by key as the cosign
// signature of the manifest dgst (a payload naming another digest, for a
// test).
func (r *Registry) SignPayload(t testing.TB, repo string, dgst digest.Digest, payload []byte, key *ecdsa.PrivateKey) {
	t.Helper()
	h := sha256.Sum256(payload)
	sig, err := ecdsa.SignASN1(rand.Reader, key, h[:])
	if err != nil {
		t.Fatal(err)
	}
	r.PushSignature(t, repo, dgst, payload, base64.StdEncoding.EncodeToString(sig))
}

// PushSignature stores payload and the base64 signature sig as the
// cosign signature manifest of dgst.
func (r *Registry) PushSignature(t testing.TB, repo string, dgst digest.Digest, payload []byte, sig string) {
	t.Helper()
	pd := digest.FromBytes(payload)
	config, _ := json.Marshal(map[string]any{
		"architecture": "", "os": "", "config": map[string]any{},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{pd.String()}},
	})
	m := ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromBytes(config), Size: int64(len(config))},
		Layers: []ocispec.Descriptor{{MediaType: "application/vnd.dev.cosign.simplesigning.v1+json", Digest: pd, Size: int64(len(payload)),
			Annotations: map[string]string{"dev.cosignproject.cosign/signature": sig}}},
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	r.PushManifest(t, repo, dgst.Algorithm().String()+"-"+dgst.Encoded()+".sig", data, config, payload)
}

// NewKey generates an ECDSA P-256 key pair, the kind `cosign
// generate-key-pair` makes, and returns it with its public key in PEM
// (cosign.pub's form).
func NewKey(t testing.TB) (*ecdsa.PrivateKey, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return key, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}
