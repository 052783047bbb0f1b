package seal

import (
	"crypto/ed25519"
	"encoding/base64"
	"strings"
	"testing"
)

func TestParsePolicy(t *testing.T) {
	pub := ed25519.PublicKey(make([]byte, 32))
	id := KeyID(pub)
	b64 := base64.StdEncoding.EncodeToString(pub)
	for _, tc := range []struct {
		name, in string
		want     string // error substring; "" means valid
		keys     int
		unsigned bool
	}{
		{name: "empty", in: ""},
		{name: "yaml", in: "allowUnsigned: true\nkeys:\n- keyID: " + id + "\n  node: node-a\n", keys: 1, unsigned: true},
		{name: "json", in: `{"keys":[{"publicKey":"` + b64 + `"}]}`, keys: 1},
		{name: "both agree", in: `{"keys":[{"publicKey":"` + b64 + `","keyID":"` + id + `"}]}`, keys: 1},
		{name: "both disagree", in: `{"keys":[{"publicKey":"` + b64 + `","keyID":"sha256:` + strings.Repeat("0", 64) + `"}]}`, want: "keys[0]: keyID"},
		{name: "node alone", in: "keys:\n- node: node-a\n", want: "a node name alone trusts nothing"},
		{name: "bad key id", in: "keys:\n- keyID: sha1:abc\n", want: "keys[0].keyID"},
		{name: "bad public key", in: "keys:\n- publicKey: AAAA\n", want: "keys[0].publicKey"},
		{name: "bad node", in: "keys:\n- keyID: " + id + "\n  node: Node_A\n", want: "keys[0].node"},
		{name: "unknown field", in: "allowUnsigend: true\n", want: "allowUnsigend"},
		{name: "wrong type", in: "allowUnsigned: maybe\n", want: "parse"},
		{name: "too large", in: strings.Repeat(" ", maxKeyFile+1), want: "more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParsePolicy([]byte(tc.in))
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Keys) != tc.keys || p.AllowUnsigned != tc.unsigned {
				t.Fatalf("policy %+v", p)
			}
		})
	}
}

func FuzzParsePolicy(f *testing.F) {
	f.Add([]byte("allowUnsigned: false\nkeys:\n- keyID: sha256:" + strings.Repeat("ab", 32) + "\n  node: node-a\n"))
	f.Add([]byte(`{"keys":[{"publicKey":"` + base64.StdEncoding.EncodeToString(make([]byte, 32)) + `"}]}`))
	f.Add([]byte("keys: [{node: x}]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePolicy(b)
		if err != nil {
			return
		}
		// Every accepted entry names a key that trust checks can match.
		for i, k := range p.Keys {
			if k.id() == "" {
				t.Fatalf("accepted keys[%d] %+v has no key id", i, k)
			}
		}
	})
}
