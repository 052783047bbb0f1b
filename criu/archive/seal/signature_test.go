package seal

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"strings"
	"testing"
	"time"
)

func TestSignatureFile(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSignature(Signer{Node: "node-a", Key: priv}, sha256.Sum256([]byte("x")), 1, true, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseSignature(s.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if *got != *s || !got.verify() || got.KeyID != KeyID(pub) {
		t.Fatalf("parsed %+v, wrote %+v", got, s)
	}
	good := string(s.Marshal())
	for _, tc := range []struct{ name, old, new, want string }{
		{"format", Format, "v0", "format"},
		{"node newline", `"node-a"`, `"node-a\nsize 9"`, "node name"},
		{"key id", s.KeyID, "sha256:00", "key id"},
		{"key id of another key", s.KeyID, "sha256:" + strings.Repeat("0", 64), "is not the public key's"},
		{"digest", s.Digest, "md5:00", "digest"},
		{"size", `"size": 1`, `"size": -1`, "negative"},
		{"created", s.Created, "yesterday", "created"},
		{"signature", s.Value, "AAAA", "signature is not"},
		{"unknown field", `"node":`, `"extra": 1, "node":`, "unknown field"},
		{"trailing", "}\n", "}{}", "after the JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(good, tc.old) {
				t.Fatalf("no %q in %s", tc.old, good)
			}
			_, err := ParseSignature([]byte(strings.Replace(good, tc.old, tc.new, 1)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := NewSignature(Signer{Node: "Bad Name", Key: priv}, [32]byte{}, 0, false, time.Now()); err == nil {
		t.Fatal("signed as a malformed node name")
	}
}

func FuzzParseSignature(f *testing.F) {
	_, priv, _ := ed25519.GenerateKey(nil)
	s, _ := NewSignature(Signer{Node: "node-a", Key: priv}, [32]byte{1}, 10, false, time.Unix(0, 0))
	f.Add(s.Marshal())
	f.Add([]byte(`{"format":"` + Format + `"}`))
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSignature(b)
		if err != nil {
			return
		}
		// An accepted file round-trips and its payload is one field a
		// line: no field can smuggle in another.
		again, err := ParseSignature(s.Marshal())
		if err != nil || *again != *s {
			t.Fatalf("round trip: %v", err)
		}
		if n := bytes.Count(s.Payload(), []byte("\n")); n != 8 {
			t.Fatalf("payload has %d lines:\n%s", n, s.Payload())
		}
	})
}
