package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"strings"
	"testing"
)

func publicPEM(t *testing.T, key any) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// TestSeccompRegistryValidated: trusted keys must be cosign's ECDSA
// P-256 public keys, plain HTTP is for loopback registries only, and an
// oci:// profile needs a key; each problem names its field.
func TestSeccompRegistryValidated(t *testing.T) {
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	good := publicPEM(t, &ec.PublicKey)
	const ref = "oci://127.0.0.1:5000/profiles/app:v1"
	for _, tc := range []struct {
		name string
		edit func(*ShimConfiguration)
		want string // "" means valid
	}{
		{"key and loopback registries", func(c *ShimConfiguration) {
			c.SeccompRegistry = SeccompRegistry{PublicKeys: []string{good}, PlainHTTP: []string{"127.0.0.1:5000", "[::1]:5000", "localhost:5000"}}
			c.SeccompProfiles = map[string]string{"app.json": ref}
		}, ""},
		{"oci profile without a key", func(c *ShimConfiguration) {
			c.SeccompProfiles = map[string]string{"app.json": ref}
		}, "seccompProfiles[app.json] is an oci:// reference, which needs seccompRegistry.publicKeys"},
		{"oci profile without a tag", func(c *ShimConfiguration) {
			c.SeccompRegistry.PublicKeys = []string{good}
			c.SeccompProfiles = map[string]string{"app.json": "oci://127.0.0.1:5000/profiles/app"}
		}, "seccompProfiles[app.json]: \"oci://127.0.0.1:5000/profiles/app\": invalid oci:// reference"},
		{"not PEM", func(c *ShimConfiguration) { c.SeccompRegistry.PublicKeys = []string{"cosign.pub"} }, "seccompRegistry.publicKeys[0]: invalid public key: no PEM block"},
		{"RSA key", func(c *ShimConfiguration) {
			c.SeccompRegistry.PublicKeys = []string{good, publicPEM(t, &rsaKey.PublicKey)}
		}, "seccompRegistry.publicKeys[1]: invalid public key"},
		{"plain HTTP elsewhere", func(c *ShimConfiguration) { c.SeccompRegistry.PlainHTTP = []string{"registry.example:5000"} }, `seccompRegistry.plainHTTP: "registry.example:5000" is not host:port on a loopback address`},
		{"plain HTTP without a port", func(c *ShimConfiguration) { c.SeccompRegistry.PlainHTTP = []string{"127.0.0.1"} }, `seccompRegistry.plainHTTP: "127.0.0.1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			tc.edit(&c)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				// The fields survive a round trip through the document.
				data, err := json.Marshal(c)
				if err != nil {
					t.Fatal(err)
				}
				var back ShimConfiguration
				if err := json.Unmarshal(data, &back); err != nil {
					t.Fatal(err)
				}
				if len(back.SeccompRegistry.PublicKeys) != 1 || len(back.SeccompRegistry.PlainHTTP) != 3 {
					t.Errorf("seccompRegistry after a round trip: %+v", back.SeccompRegistry)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one with %q", err, tc.want)
			}
		})
	}
}
