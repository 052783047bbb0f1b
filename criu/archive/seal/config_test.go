package seal

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var testNames = FieldNames{Recipients: "enc.recipients", Identities: "enc.identities", SigningKey: "signing.keyFile", Node: "signing.nodeName", TrustPolicy: "trustPolicy"}

func TestConfigLoad(t *testing.T) {
	k := newKeys(t, "node-a")
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyPEM, err := marshalSigningKey(k.signer.Key)
	if err != nil {
		t.Fatal(err)
	}
	key := write("node.key", string(keyPEM))
	id := write("id.txt", k.id.String()+"\n")
	policy := write("policy.yaml", "keys:\n- keyID: "+KeyID(k.pub)+"\n")
	good := Config{Recipients: []string{k.id.Recipient().String()}, Identities: []string{id}, SigningKey: key, Node: "node-a", TrustPolicy: policy}
	w, o, err := good.Load(testNames)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Recipients) != 1 || w.Signer == nil || w.Signer.Node != "node-a" || len(o.Identities) != 1 || o.Policy == nil || len(o.Policy.Keys) != 1 {
		t.Fatalf("loaded %+v %+v", w, o)
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"relative recipients file", func(c *Config) { c.Recipients = []string{"recipients.txt"} }, "enc.recipients"},
		{"bad recipient", func(c *Config) { c.Recipients = []string{"age1xyz"} }, "enc.recipients"},
		{"relative identity", func(c *Config) { c.Identities = []string{"id.txt"} }, "enc.identities"},
		{"missing identity", func(c *Config) { c.Identities = []string{filepath.Join(dir, "none")} }, "enc.identities"},
		{"identity not a key", func(c *Config) { c.Identities = []string{policy} }, "enc.identities"},
		{"missing signing key", func(c *Config) { c.SigningKey = filepath.Join(dir, "none") }, "signing.keyFile"},
		{"signing key not a key", func(c *Config) { c.SigningKey = id }, "signing.keyFile"},
		{"bad node", func(c *Config) { c.Node = "Node A" }, "signing.nodeName"},
		{"bad policy", func(c *Config) { c.TrustPolicy = id }, "trustPolicy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.edit(&c)
			if _, _, err := c.Load(testNames); err == nil || !strings.HasPrefix(err.Error(), tc.want+":") {
				t.Fatalf("error %v, want it to start with %q", err, tc.want)
			}
		})
	}
	if w, o, err := (Config{}).Load(testNames); err != nil || w.Enabled() || o.Policy != nil || o.Identities != nil {
		t.Fatalf("empty config: %+v %+v %v", w, o, err)
	}
}
