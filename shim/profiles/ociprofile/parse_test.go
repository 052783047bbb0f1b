package ociprofile

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/kernel/seccomp"
)

const spoProfile = `apiVersion: security-profiles-operator.x-k8s.io/v1beta1
kind: SeccompProfile
metadata:
  name: app
spec:
  defaultAction: SCMP_ACT_ERRNO
  architectures: [SCMP_ARCH_X86_64]
  baseProfileName: oci://ghcr.io/security-profiles/runc:v1.1.5
  syscalls:
  - action: SCMP_ACT_ALLOW
    names: [read, write]
  - action: SCMP_ACT_ERRNO
    errnoRet: 1
    names: [personality]
    args:
    - index: 0
      value: 8
      op: SCMP_CMP_EQ
`

func TestMaxProfileBytesIsSeccomps(t *testing.T) {
	if MaxProfileBytes != seccomp.MaxProfileBytes {
		t.Fatalf("MaxProfileBytes %d, kernel/seccomp's %d", MaxProfileBytes, seccomp.MaxProfileBytes)
	}
}

func TestParseReference(t *testing.T) {
	d := digest.FromString("m")
	tests := []struct {
		in      string
		want    Reference
		wantErr bool
	}{
		{in: "oci://127.0.0.1:5000/profiles/app:v1", want: Reference{Registry: "127.0.0.1:5000", Repository: "profiles/app", Tag: "v1"}},
		{in: " oci://ghcr.io/security-profiles/runc:v1.1.5\n", want: Reference{Registry: "ghcr.io", Repository: "security-profiles/runc", Tag: "v1.1.5"}},
		{in: "oci://localhost:5000/app@" + d.String(), want: Reference{Registry: "localhost:5000", Repository: "app", Digest: d}},
		{in: "oci://localhost:5000/app:v1@" + d.String(), want: Reference{Registry: "localhost:5000", Repository: "app", Digest: d}},
		{in: "oci://localhost:5000/app", wantErr: true},    // no tag: "latest" is not assumed
		{in: "localhost:5000/app:v1", wantErr: true},       // no scheme
		{in: "oci://app:v1", wantErr: true},                // no registry
		{in: "oci://localhost:5000/App:v1", wantErr: true}, // repository names are lower case
		{in: "oci://localhost:5000/app@sha256:abc", wantErr: true},
		{in: "oci://localhost:5000/app@sha512:" + strings.Repeat("a", 128), wantErr: true},
		{in: "oci://localhost:5000/app:" + strings.Repeat("t", 129), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseReference(tc.in)
			if tc.wantErr {
				if !errors.Is(err, ErrReference) || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), strings.TrimSpace(tc.in)) {
					t.Fatalf("err = %v, want ErrReference naming the input", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if again, err := ParseReference(got.String()); err != nil || again != got {
				t.Errorf("String() %q does not parse back: %+v, %v", got, again, err)
			}
		})
	}
}

func FuzzParseReference(f *testing.F) {
	for _, s := range []string{"oci://127.0.0.1:5000/profiles/app:v1", "oci://h/a@" + digest.FromString("x").String(), "oci://", "oci://a/b:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseReference(s)
		if err != nil {
			if !errors.Is(err, ErrReference) {
				t.Fatalf("error %v is not ErrReference", err)
			}
			return
		}
		if r.Tag == "" && r.Digest == "" {
			t.Fatalf("%q parsed without a tag or digest", s)
		}
		if again, err := ParseReference(r.String()); err != nil || again != r {
			t.Fatalf("%q -> %q does not parse back: %v", s, r, err)
		}
	})
}

func pemOf(t testing.TB, key any) []byte {
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func TestParsePublicKey(t *testing.T) {
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	good := pemOf(t, &p256.PublicKey)
	tests := []struct {
		name string
		in   []byte
		want string // in the error; "" for success
	}{
		{"cosign.pub", good, ""},
		{"empty", nil, "no PEM block"},
		{"two keys", append(append([]byte{}, good...), good...), "more than one PEM block"},
		{"private key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte{1}}), `"EC PRIVATE KEY"`},
		{"garbage DER", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte{1, 2}}), "invalid public key"},
		{"P-384", pemOf(t, &p384.PublicKey), "P-384"},
		{"ed25519", pemOf(t, edPub), "ed25519"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, err := ParsePublicKey(tc.in)
			if tc.want == "" {
				if err != nil || !k.Equal(&p256.PublicKey) {
					t.Fatalf("key %v, err %v", k, err)
				}
				return
			}
			if !errors.Is(err, ErrKey) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrKey with %q", err, tc.want)
			}
		})
	}
}

func FuzzParsePublicKey(f *testing.F) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	f.Add(pemOf(f, &k.PublicKey))
	f.Add([]byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := ParsePublicKey(data)
		if err != nil {
			if !errors.Is(err, ErrKey) {
				t.Fatalf("error %v is not ErrKey", err)
			}
			return
		}
		if k.Curve != elliptic.P256() {
			t.Fatalf("accepted a key on %s", k.Curve.Params().Name)
		}
	})
}

func TestConvertProfile(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr error
		want    string // in the error
	}{
		{name: "spoc's SeccompProfile", in: spoProfile},
		{name: "as JSON", in: `{"apiVersion":"security-profiles-operator.x-k8s.io/v1","kind":"SeccompProfile","spec":{"defaultAction":"SCMP_ACT_LOG","disabled":false}}`},
		{name: "selinux", in: "apiVersion: security-profiles-operator.x-k8s.io/v1alpha2\nkind: SelinuxProfile\nspec: {}\n", wantErr: ErrNotProfile, want: `"SelinuxProfile"`},
		{name: "another group", in: "apiVersion: example.com/v1\nkind: SeccompProfile\nspec: {}\n", wantErr: ErrNotProfile, want: "example.com/v1"},
		{name: "a bare runtime-spec profile", in: `{"defaultAction":"SCMP_ACT_ALLOW"}`, wantErr: ErrNotProfile},
		{name: "no spec", in: "apiVersion: security-profiles-operator.x-k8s.io/v1beta1\nkind: SeccompProfile\n", wantErr: ErrNotProfile, want: "no spec"},
		{name: "disabled", in: "apiVersion: security-profiles-operator.x-k8s.io/v1beta1\nkind: SeccompProfile\nspec:\n  disabled: true\n  defaultAction: SCMP_ACT_ALLOW\n", wantErr: ErrNotProfile, want: "disabled"},
		{name: "not YAML", in: "kind: [", wantErr: ErrMalformed},
		{name: "a list", in: "- a\n- b\n", wantErr: ErrNotProfile},
		{name: "too large", in: "#" + strings.Repeat("x", MaxProfileBytes), wantErr: ErrTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := ConvertProfile([]byte(tc.in))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want %v with %q", err, tc.wantErr, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			p, err := seccomp.Parse(out, seccomp.ParseOptions{})
			if err != nil {
				t.Fatalf("converted profile does not parse: %v\n%s", err, out)
			}
			if strings.Contains(string(out), "disabled") {
				t.Errorf("SPO's disabled field kept: %s", out)
			}
			if tc.name == "spoc's SeccompProfile" {
				if p.BaseProfileName != "oci://ghcr.io/security-profiles/runc:v1.1.5" || len(p.Syscalls) != 2 || p.Syscalls[1].Args[0].Value != 8 {
					t.Errorf("converted %+v from\n%s", p, out)
				}
			}
		})
	}
}

func FuzzConvertProfile(f *testing.F) {
	f.Add([]byte(spoProfile))
	f.Add([]byte("kind: SeccompProfile\napiVersion: security-profiles-operator.x-k8s.io/v1\nspec: {a: &a [*a, *a]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := ConvertProfile(data)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error %v has no class", err)
			}
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("output is not a JSON object: %v", err)
		}
		if _, ok := m["disabled"]; ok {
			t.Fatal("disabled kept")
		}
	})
}

// manifestJSON is a spoc manifest with the given layers.
func manifestJSON(layers ...ocispec.Descriptor) []byte {
	m := map[string]any{"schemaVersion": 2, "mediaType": MediaTypeManifest, "artifactType": "application/vnd.unknown.config.v1+json",
		"config": ocispec.DescriptorEmptyJSON, "layers": layers}
	data, _ := json.Marshal(m)
	return data
}

func layer(title string, size int64, p *ocispec.Platform) ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromString(title), Size: size,
		Annotations: map[string]string{AnnotationTitle: title}, Platform: p}
}

func TestProfileLayer(t *testing.T) {
	arm := &ocispec.Platform{OS: "linux", Architecture: "arm64"}
	tests := []struct {
		name     string
		manifest []byte
		arch     string
		want     string // the title picked
		wantErr  error
	}{
		{name: "no platform", manifest: manifestJSON(layer("profile.yaml", 10, nil)), arch: "amd64", want: "profile.yaml"},
		{name: "the node's platform by title", manifest: manifestJSON(layer("profile.yaml", 10, nil), layer("profile-linux-amd64.yaml", 10, nil)), arch: "amd64", want: "profile-linux-amd64.yaml"},
		{name: "the node's platform by platform", manifest: manifestJSON(layer("profile-linux-amd64.yaml", 10, nil), layer("profile-linux-arm64-v8.yaml", 10, arm)), arch: "arm64", want: "profile-linux-arm64-v8.yaml"},
		{name: "another platform only", manifest: manifestJSON(layer("profile-linux-arm64.yaml", 10, arm)), arch: "amd64", wantErr: ErrNotProfile},
		{name: "no profile file", manifest: manifestJSON(layer("policy.rego", 10, nil)), arch: "amd64", wantErr: ErrNotProfile},
		{name: "an image", manifest: []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"` + digest.FromString("c").String() + `","size":1},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"` + digest.FromString("l").String() + `","size":5}]}`), arch: "amd64", wantErr: ErrNotProfile},
		{name: "an index", manifest: []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}`), arch: "amd64", wantErr: ErrNotProfile},
		{name: "oversized layer", manifest: manifestJSON(layer("profile.yaml", MaxProfileBytes+1, nil)), arch: "amd64", wantErr: ErrTooLarge},
		{name: "negative size", manifest: manifestJSON(layer("profile.yaml", -1, nil)), arch: "amd64", wantErr: ErrTooLarge},
		{name: "bad digest", manifest: []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","layers":[{"mediaType":"x","digest":"sha256:zz","size":1,"annotations":{"org.opencontainers.image.title":"profile.yaml"}}]}`), arch: "amd64", wantErr: ErrMalformed},
		{name: "schema 1", manifest: []byte(`{"schemaVersion":1,"mediaType":"application/vnd.oci.image.manifest.v1+json"}`), arch: "amd64", wantErr: ErrMalformed},
		{name: "no media type", manifest: []byte(`{"schemaVersion":2}`), arch: "amd64", wantErr: ErrMalformed},
		{name: "not JSON", manifest: []byte(`{`), arch: "amd64", wantErr: ErrMalformed},
		{name: "too large", manifest: []byte(strings.Repeat(" ", MaxManifestBytes+1)), arch: "amd64", wantErr: ErrTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := profileLayer(tc.manifest, tc.arch)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := l.Annotations[AnnotationTitle]; got != tc.want {
				t.Errorf("picked %s, want %s", got, tc.want)
			}
		})
	}
}

func FuzzProfileLayer(f *testing.F) {
	f.Add(manifestJSON(layer("profile.yaml", 10, nil)), "amd64")
	f.Add(manifestJSON(layer("profile-linux-arm64.yaml", 10, &ocispec.Platform{OS: "linux", Architecture: "arm64"})), "arm64")
	f.Fuzz(func(t *testing.T, data []byte, arch string) {
		l, err := profileLayer(data, arch)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error %v has no class", err)
			}
			return
		}
		if l.Size < 0 || l.Size > MaxProfileBytes || l.Digest.Validate() != nil {
			t.Fatalf("accepted layer %+v", l)
		}
	})
}

// sigManifest is a cosign signature manifest with one layer per
// annotation value (nil: no annotation).
func sigManifest(payload []byte, sigs ...*string) []byte {
	var layers []ocispec.Descriptor
	for _, s := range sigs {
		l := ocispec.Descriptor{MediaType: MediaTypeSimpleSigning, Digest: digest.FromBytes(payload), Size: int64(len(payload))}
		if s != nil {
			l.Annotations = map[string]string{AnnotationSignature: *s}
		}
		layers = append(layers, l)
	}
	data, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": MediaTypeManifest, "config": ocispec.DescriptorEmptyJSON, "layers": layers})
	return data
}

func ptr(s string) *string { return &s }

func TestParseSignatureManifest(t *testing.T) {
	payload := []byte(`{"critical":{}}`)
	tests := []struct {
		name     string
		manifest []byte
		n        int
		wantErr  error
		want     string
	}{
		{name: "one signature", manifest: sigManifest(payload, ptr("AAAA")), n: 1},
		{name: "one of two usable", manifest: sigManifest(payload, nil, ptr("AAAA")), n: 1},
		{name: "no annotation", manifest: sigManifest(payload, nil), wantErr: ErrUnsigned, want: "no dev.cosignproject.cosign/signature"},
		{name: "not base64", manifest: sigManifest(payload, ptr("!!")), wantErr: ErrUnsigned, want: "not base64"},
		{name: "no layer", manifest: sigManifest(payload), wantErr: ErrUnsigned, want: "no application/vnd.dev.cosign.simplesigning.v1+json layer"},
		{name: "bounded", manifest: sigManifest(payload, func() []*string {
			s := make([]*string, MaxSignatures+5)
			for i := range s {
				s[i] = ptr("AAAA")
			}
			return s
		}()...), n: MaxSignatures},
		{name: "an index", manifest: []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json"}`), wantErr: ErrNotProfile},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSignatureManifest(tc.manifest)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want %v with %q", err, tc.wantErr, tc.want)
				}
				return
			}
			if err != nil || len(got) != tc.n {
				t.Fatalf("%d layers, %v; want %d", len(got), err, tc.n)
			}
		})
	}
}

func FuzzParseSignatureManifest(f *testing.F) {
	f.Add(sigManifest([]byte("p"), ptr("AAAA")))
	f.Fuzz(func(t *testing.T, data []byte) {
		layers, err := parseSignatureManifest(data)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error %v has no class", err)
			}
			return
		}
		if len(layers) == 0 || len(layers) > MaxSignatures {
			t.Fatalf("%d layers", len(layers))
		}
		for _, l := range layers {
			if l.payload.Size < 0 || l.payload.Size > MaxPayloadBytes {
				t.Fatalf("payload of %d bytes accepted", l.payload.Size)
			}
		}
	})
}

func TestVerifyPayload(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	md := digest.FromString("manifest")
	payload := func(d digest.Digest, typ string) []byte {
		return []byte(fmt.Sprintf(`{"critical":{"identity":{"docker-reference":"h/r"},"image":{"docker-manifest-digest":%q},"type":%q},"optional":null}`, d, typ))
	}
	sign := func(k *ecdsa.PrivateKey, p []byte) []byte {
		h := sha256.Sum256(p)
		s, err := ecdsa.SignASN1(rand.Reader, k, h[:])
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	good := payload(md, SignatureType)
	tests := []struct {
		name    string
		keys    []*ecdsa.PublicKey
		payload []byte
		sig     []byte
		wantErr error
	}{
		{name: "good", keys: []*ecdsa.PublicKey{&key.PublicKey}, payload: good, sig: sign(key, good)},
		{name: "second key", keys: []*ecdsa.PublicKey{&other.PublicKey, &key.PublicKey}, payload: good, sig: sign(key, good)},
		{name: "other key", keys: []*ecdsa.PublicKey{&other.PublicKey}, payload: good, sig: sign(key, good), wantErr: ErrBadSignature},
		{name: "payload changed", keys: []*ecdsa.PublicKey{&key.PublicKey}, payload: payload(digest.FromString("x"), SignatureType), sig: sign(key, good), wantErr: ErrBadSignature},
		{name: "other digest", keys: []*ecdsa.PublicKey{&key.PublicKey}, payload: payload(digest.FromString("x"), SignatureType), sig: sign(key, payload(digest.FromString("x"), SignatureType)), wantErr: ErrOtherDigest},
		{name: "other type", keys: []*ecdsa.PublicKey{&key.PublicKey}, payload: payload(md, "x"), sig: sign(key, payload(md, "x")), wantErr: ErrMalformed},
		{name: "garbage signature", keys: []*ecdsa.PublicKey{&key.PublicKey}, payload: good, sig: []byte("nope"), wantErr: ErrBadSignature},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := verifyPayload(tc.keys, tc.payload, tc.sig, md)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr != nil) != (err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func FuzzParsePayload(f *testing.F) {
	f.Add([]byte(`{"critical":{"identity":{"docker-reference":"h/r"},"image":{"docker-manifest-digest":"sha256:00"},"type":"cosign container image signature"},"optional":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePayload(data)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error %v has no class", err)
			}
			return
		}
		if p.Critical.Type != SignatureType {
			t.Fatalf("type %q accepted", p.Critical.Type)
		}
	})
}
