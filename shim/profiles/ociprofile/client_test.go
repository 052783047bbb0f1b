package ociprofile

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/kernel/seccomp"
	"github.com/nodeshim/nodeshim/testenv/registrytest"
)

// trusted returns a client of reg that trusts key's public half.
func trusted(t *testing.T, reg *registrytest.Registry, pub string) *Client {
	t.Helper()
	k, err := ParsePublicKey([]byte(pub))
	if err != nil {
		t.Fatal(err)
	}
	return &Client{Keys: []*ecdsa.PublicKey{k}, PlainHTTP: []string{reg.Host}, Arch: "amd64"}
}

// TestFetchSigned reads back what spoc push and cosign sign --key wrote:
// by tag and by digest, the node's platform's layer of a multi-platform
// artifact, and the profile as runtime-spec JSON that seccomp parses.
func TestFetchSigned(t *testing.T) {
	reg := registrytest.Start(t)
	key, pub := registrytest.NewKey(t)
	c := trusted(t, reg, pub)
	ctx := context.Background()

	desc := reg.PushSPOC(t, "profiles/app", "v1", registrytest.Layer{Title: "profile.yaml", Data: []byte(spoProfile)})
	reg.Sign(t, "profiles/app", desc.Digest, key)
	for _, ref := range []string{reg.Ref("profiles/app", "v1"), reg.Ref("profiles/app", desc.Digest.String())} {
		p, err := c.Fetch(ctx, ref)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		if p.Manifest != desc.Digest || p.Layer.Annotations[AnnotationTitle] != "profile.yaml" {
			t.Errorf("%s: manifest %s layer %+v, pushed %s", ref, p.Manifest, p.Layer, desc.Digest)
		}
		prof, err := seccomp.Parse(p.JSON, seccomp.ParseOptions{})
		if err != nil {
			t.Fatalf("%s: %v\n%s", ref, err, p.JSON)
		}
		if prof.DefaultAction != seccomp.ActErrno || len(prof.Syscalls) != 2 {
			t.Errorf("%s: profile %+v", ref, prof)
		}
	}

	// spoc push --platforms: one layer a platform, and profile.yaml.
	amd := `{"apiVersion":"security-profiles-operator.x-k8s.io/v1beta1","kind":"SeccompProfile","spec":{"defaultAction":"SCMP_ACT_LOG"}}`
	multi := reg.PushSPOC(t, "profiles/multi", "v1",
		registrytest.Layer{Title: "profile-linux-arm64.yaml", Platform: &ocispec.Platform{OS: "linux", Architecture: "arm64"}, Data: []byte(spoProfile)},
		registrytest.Layer{Title: "profile-linux-amd64.yaml", Platform: &ocispec.Platform{OS: "linux", Architecture: "amd64"}, Data: []byte(amd)})
	reg.Sign(t, "profiles/multi", multi.Digest, key)
	p, err := c.Fetch(ctx, reg.Ref("profiles/multi", "v1"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Layer.Annotations[AnnotationTitle] != "profile-linux-amd64.yaml" || !strings.Contains(string(p.JSON), "SCMP_ACT_LOG") {
		t.Errorf("picked %s: %s", p.Layer.Annotations[AnnotationTitle], p.JSON)
	}
}

// TestFetchRefused: every way an artifact can fail to be a signed profile
// is refused, with an error that names the reference and carries its
// class, and nothing of the profile is returned.
func TestFetchRefused(t *testing.T) {
	reg := registrytest.Start(t)
	key, pub := registrytest.NewKey(t)
	otherKey, _ := registrytest.NewKey(t)
	c := trusted(t, reg, pub)
	yaml := []byte(spoProfile)

	// push pushes yaml as a signed spoc artifact in repo and returns its
	// manifest's descriptor.
	push := func(repo string, data []byte) ocispec.Descriptor {
		d := reg.PushSPOC(t, repo, "v1", registrytest.Layer{Title: "profile.yaml", Data: data})
		reg.Sign(t, repo, d.Digest, key)
		return d
	}
	blobPath := func(d digest.Digest) string {
		matches, _ := filepath.Glob(filepath.Join(reg.Dir, "storage-*", "docker/registry/v2/blobs/sha256", d.Encoded()[:2], d.Encoded(), "data"))
		if len(matches) != 1 {
			t.Fatalf("blob %s in the registry's storage: %v", d, matches)
		}
		return matches[0]
	}
	// layerOf returns the profile layer of the manifest d in repo.
	layerOf := func(repo string, d digest.Digest) ocispec.Descriptor {
		_, rc, err := reg.Repository(t, repo).Manifests().FetchReference(context.Background(), d.String())
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		var m ocispec.Manifest
		if err := json.NewDecoder(rc).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m.Layers[0]
	}

	tests := []struct {
		name  string
		setup func(repo string) string // returns the reference
		// client, when set, is the client used for the reference's
		// registry host instead of c.
		client  func(host string) *Client
		wantErr error
		class   error
		want    string
	}{
		{name: "unsigned", setup: func(repo string) string {
			reg.PushSPOC(t, repo, "v1", registrytest.Layer{Title: "profile.yaml", Data: yaml})
			return reg.Ref(repo, "v1")
		}, wantErr: ErrUnsigned, want: "no tag sha256-"},
		{name: "signed by another key", setup: func(repo string) string {
			d := reg.PushSPOC(t, repo, "v1", registrytest.Layer{Title: "profile.yaml", Data: yaml})
			reg.Sign(t, repo, d.Digest, otherKey)
			return reg.Ref(repo, "v1")
		}, wantErr: ErrBadSignature},
		{name: "signature for another digest", setup: func(repo string) string {
			// A good signature of another artifact, copied under this
			// one's signature tag.
			other := push(repo+"-other", []byte(strings.Replace(spoProfile, "write", "mkdir", 1)))
			d := reg.PushSPOC(t, repo, "v1", registrytest.Layer{Title: "profile.yaml", Data: yaml})
			reg.SignPayload(t, repo, d.Digest, registrytest.Payload(reg.Host+"/"+repo+"-other", other.Digest), key)
			return reg.Ref(repo, "v1")
		}, wantErr: ErrOtherDigest},
		{name: "manifest replaced under the tag", setup: func(repo string) string {
			// Signed, then the tag moved to a changed manifest (another
			// layer): the new digest has no signature.
			push(repo, yaml)
			reg.PushSPOC(t, repo, "v1", registrytest.Layer{Title: "profile.yaml", Data: []byte(strings.Replace(spoProfile, "write", "mkdir", 1))})
			return reg.Ref(repo, "v1")
		}, wantErr: ErrUnsigned},
		{name: "manifest replaced, old signature copied", setup: func(repo string) string {
			old := push(repo, yaml)
			d := reg.PushSPOC(t, repo, "v1", registrytest.Layer{Title: "profile.yaml", Data: []byte(strings.Replace(spoProfile, "write", "mkdir", 1))})
			reg.SignPayload(t, repo, d.Digest, registrytest.Payload(reg.Host+"/"+repo, old.Digest), key)
			return reg.Ref(repo, "v1")
		}, wantErr: ErrOtherDigest},
		{name: "digest of another repository", setup: func(repo string) string {
			push(repo, yaml)
			other := push(repo+"-b", []byte(strings.Replace(spoProfile, "write", "mkdir", 1)))
			// The registry holds other only in repo-b: by digest in repo
			// it is not there.
			return "oci://" + reg.Host + "/" + repo + ":v1@" + other.Digest.String()
		}, wantErr: ErrNotFound, class: errdefs.ErrNotFound},
		{name: "layer changed in the registry", setup: func(repo string) string {
			d := push(repo, yaml)
			l := layerOf(repo, d.Digest)
			// Same size, other bytes: the registry serves them as is.
			tampered := bytes.Replace(yaml, []byte("read, write"), []byte("read, mkdir"), 1)
			if err := os.WriteFile(blobPath(l.Digest), tampered, 0o644); err != nil {
				t.Fatal(err)
			}
			return reg.Ref(repo, "v1")
		}, wantErr: ErrDigest, want: "it hashes to"},
		{name: "layer grown in the registry", setup: func(repo string) string {
			d := push(repo, yaml)
			l := layerOf(repo, d.Digest)
			if err := os.WriteFile(blobPath(l.Digest), append(bytes.Repeat([]byte("#\n"), MaxProfileBytes), yaml...), 0o644); err != nil {
				t.Fatal(err)
			}
			return reg.Ref(repo, "v1")
		}, wantErr: ErrDigest},
		{name: "payload changed in the registry", setup: func(repo string) string {
			d := reg.PushSPOC(t, repo, "v1", registrytest.Layer{Title: "profile.yaml", Data: yaml})
			p := registrytest.Payload(reg.Host+"/"+repo, d.Digest)
			reg.SignPayload(t, repo, d.Digest, p, key)
			if err := os.WriteFile(blobPath(digest.FromBytes(p)), bytes.Replace(p, []byte("cosign container"), []byte("COSIGN container"), 1), 0o644); err != nil {
				t.Fatal(err)
			}
			return reg.Ref(repo, "v1")
		}, wantErr: ErrDigest},
		{name: "oversized layer", setup: func(repo string) string {
			big := append([]byte(spoProfile), bytes.Repeat([]byte("# padding\n"), MaxProfileBytes/10+1)...)
			push(repo, big)
			return reg.Ref(repo, "v1")
		}, wantErr: ErrTooLarge},
		{name: "not a profile artifact", setup: func(repo string) string {
			d := reg.PushSPOC(t, repo, "v1", registrytest.Layer{Title: "policy.rego", Data: []byte("package x\n")})
			reg.Sign(t, repo, d.Digest, key)
			return reg.Ref(repo, "v1")
		}, wantErr: ErrNotProfile, want: "policy.rego"},
		{name: "an AppArmor profile", setup: func(repo string) string {
			push(repo, []byte("apiVersion: security-profiles-operator.x-k8s.io/v1alpha1\nkind: AppArmorProfile\nspec: {}\n"))
			return reg.Ref(repo, "v1")
		}, wantErr: ErrNotProfile, want: "AppArmorProfile"},
		{name: "an index", setup: func(repo string) string {
			idx, _ := json.Marshal(ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: MediaTypeIndex})
			d := reg.PushManifest(t, repo, "v1", idx)
			reg.Sign(t, repo, d, key)
			return reg.Ref(repo, "v1")
		}, wantErr: ErrNotProfile, want: "an index"},
		{name: "no such tag", setup: func(repo string) string {
			push(repo, yaml)
			return reg.Ref(repo, "v2")
		}, wantErr: ErrNotFound, class: errdefs.ErrNotFound},
		{name: "no key configured", setup: func(repo string) string {
			push(repo, yaml)
			return reg.Ref(repo, "v1")
		}, client: func(h string) *Client { return &Client{PlainHTTP: []string{h}} }, wantErr: ErrNoKeys, class: errdefs.ErrNotSupported},
		{name: "plain HTTP not configured", setup: func(repo string) string {
			push(repo, yaml)
			return reg.Ref(repo, "v1")
		}, client: func(string) *Client { return &Client{Keys: c.Keys} }, wantErr: ErrUnavailable, class: errdefs.ErrUnavailable, want: "seccompRegistry.plainHTTP"},
		{name: "registry down", setup: func(string) string {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			host := l.Addr().String()
			l.Close()
			return "oci://" + host + "/profiles/app:v1"
		}, client: func(h string) *Client { return &Client{Keys: c.Keys, PlainHTTP: []string{h}} }, wantErr: ErrUnavailable, class: errdefs.ErrUnavailable},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			repo := "refused/case" + string(rune('a'+i))
			ref := tc.setup(repo)
			cl := c
			if tc.client != nil {
				r, err := ParseReference(ref)
				if err != nil {
					t.Fatal(err)
				}
				cl = tc.client(r.Registry)
			}
			p, err := cl.Fetch(context.Background(), ref)
			t.Log(err)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			class := tc.class
			if class == nil {
				class = errdefs.ErrInvalidArgument
			}
			if !errors.Is(err, class) {
				t.Errorf("err = %v is not of class %v", err, class)
			}
			var oe *Error
			if !errors.As(err, &oe) || oe.Ref != ref || !strings.HasPrefix(err.Error(), ref+": ") {
				t.Errorf("err = %q does not name %s", err, ref)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %q does not say %q", err, tc.want)
			}
			if p.JSON != nil {
				t.Errorf("a refused fetch returned a profile: %s", p.JSON)
			}
		})
	}
}

// TestFetchTimesOut: a registry that accepts the connection and never
// answers is given Client.Timeout, then the reference is unavailable.
func TestFetchTimesOut(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var conns []net.Conn
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // held open, never answered
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	_, pub := registrytest.NewKey(t)
	k, err := ParsePublicKey([]byte(pub))
	if err != nil {
		t.Fatal(err)
	}
	host := l.Addr().String()
	c := &Client{Keys: []*ecdsa.PublicKey{k}, PlainHTTP: []string{host}, Timeout: 100 * time.Millisecond}
	ref := "oci://" + host + "/profiles/app:v1"
	_, err = c.Fetch(context.Background(), ref)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), ref+": ") {
		t.Fatalf("err = %v, want ErrUnavailable after the deadline, naming %s", err, ref)
	}
}
