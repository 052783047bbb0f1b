package image

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/archive/seal"
)

// FuzzVerify: Verify never panics on any input, refuses every image
// under a policy whose one key the fuzzer does not hold (a signature
// cannot be forged), and under a policy allowing unsigned images fails
// only with ErrUntrusted or a read error of the tar.
func FuzzVerify(f *testing.F) {
	config := `{"id":"c1","name":"app","rootfsImageName":"localhost/app:1","createdTime":"2025-03-04T05:06:07Z"}`
	archive := archiveOf(f, map[string]string{criu.ConfigDump: config, criu.SpecDump: "{}"}, criu.ConfigDump, criu.SpecDump)
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	for _, o := range []Options{{}, {Signer: &seal.Signer{Key: priv, Node: "node-a"}, Now: func() time.Time { return time.Unix(0, 0) }}} {
		var out bytes.Buffer
		if _, err := WriteWith(bytes.NewReader(archive), "localhost/app-checkpoint:1", &out, o); err != nil {
			f.Fatal(err)
		}
		f.Add(out.Bytes())
	}
	f.Add([]byte{})
	otherPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	strict := &seal.Policy{Keys: []seal.TrustedKey{{KeyID: seal.KeyID(otherPub)}}}
	lax := &seal.Policy{AllowUnsigned: true}
	f.Fuzz(func(t *testing.T, b []byte) {
		if sig, err := Verify(bytes.NewReader(b), "fuzz.tar", strict); err == nil {
			t.Fatalf("an image verified under a key nobody holds: %+v", sig)
		}
		if _, err := Verify(bytes.NewReader(b), "fuzz.tar", lax); err != nil && !errors.Is(err, seal.ErrUntrusted) && !strings.HasPrefix(err.Error(), "read fuzz.tar") {
			t.Fatalf("Verify failed neither refusing nor reading: %v", err)
		}
	})
}
