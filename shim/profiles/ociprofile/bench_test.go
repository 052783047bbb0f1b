package ociprofile

import (
	"context"
	"crypto/ecdsa"
	"testing"

	"github.com/nodeshim/nodeshim/testenv/registrytest"
)

// BenchmarkFetch reads a signed profile from docker-registry on loopback:
// the manifest, the signature manifest, its payload (an ECDSA P-256
// verification) and the profile layer, converted to runtime-spec JSON.
// It is what one oci:// reference costs each time serve installs its
// configuration.
func BenchmarkFetch(b *testing.B) {
	reg := registrytest.Start(b)
	key, pub := registrytest.NewKey(b)
	d := reg.PushSPOC(b, "profiles/app", "v1", registrytest.Layer{Title: DefaultProfileFile, Data: []byte(spoProfile)})
	reg.Sign(b, "profiles/app", d.Digest, key)
	k, err := ParsePublicKey([]byte(pub))
	if err != nil {
		b.Fatal(err)
	}
	c := &Client{Keys: []*ecdsa.PublicKey{k}, PlainHTTP: []string{reg.Host}}
	ref := reg.Ref("profiles/app", "v1")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Fetch(context.Background(), ref); err != nil {
			b.Fatal(err)
		}
	}
}
