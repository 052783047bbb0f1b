package config

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// TestCheckpointTransferValidated: receiving transfers is refused without
// what makes a transfer safe (client certificates on the TLS listener,
// the senders' keys, this node's identity) and with a negative bound;
// sending without the node's certificate, signing key or recipients.
func TestCheckpointTransferValidated(t *testing.T) {
	ready := func(c *ShimConfiguration) {
		c.API = API{TCPAddress: "127.0.0.1:10260", TLSCertFile: "/etc/tls/node.crt", TLSKeyFile: "/etc/tls/node.key", ClientCAFile: "/etc/tls/ca.crt"}
		c.Checkpoint.TrustPolicy = "/etc/nodeshim/trust.yaml"
		c.Checkpoint.Encryption.Identities = []string{"/etc/nodeshim/node.age"}
		c.Checkpoint.Transfer.Enabled = true
	}
	neg := resource.MustParse("-1Gi")
	sender := func(c *ShimConfiguration) {
		c.API = API{TCPAddress: "127.0.0.1:10260", TLSCertFile: "/etc/tls/node.crt", TLSKeyFile: "/etc/tls/node.key", ClientCAFile: "/etc/tls/ca.crt"}
		c.Checkpoint.Signing.KeyFile = "/etc/nodeshim/node.key"
		c.Checkpoint.Encryption.Recipients = []string{"/etc/nodeshim/recipients"}
		c.Checkpoint.Transfer.Send = true
	}
	for _, tc := range []struct {
		name string
		edit func(*ShimConfiguration)
		want string // "" means valid
	}{
		{"off", func(c *ShimConfiguration) {}, ""},
		{"all set", ready, ""},
		{"no TLS listener", func(c *ShimConfiguration) { ready(c); c.API = API{} }, "checkpoint.transfer.enabled needs api.tcpAddress and api.clientCAFile"},
		{"token only", func(c *ShimConfiguration) { ready(c); c.API.ClientCAFile, c.API.TokenFile = "", "/etc/tls/token" }, "needs api.tcpAddress and api.clientCAFile"},
		{"no trust policy", func(c *ShimConfiguration) { ready(c); c.Checkpoint.TrustPolicy = "" }, "needs checkpoint.trustPolicy and checkpoint.encryption.identities"},
		{"no identity", func(c *ShimConfiguration) { ready(c); c.Checkpoint.Encryption.Identities = nil }, "needs checkpoint.trustPolicy and checkpoint.encryption.identities"},
		{"negative bound", func(c *ShimConfiguration) { ready(c); c.Checkpoint.Transfer.MaxBytes = &neg }, "checkpoint.transfer.maxBytes -1Gi is negative"},
		{"send", sender, ""},
		{"send without the node's certificate", func(c *ShimConfiguration) { sender(c); c.API.TLSKeyFile = "" }, "checkpoint.transfer.send needs api.tlsCertFile, api.tlsKeyFile and api.clientCAFile"},
		{"send without a recipient", func(c *ShimConfiguration) { sender(c); c.Checkpoint.Encryption.Recipients = nil }, "checkpoint.transfer.send needs checkpoint.signing.keyFile and checkpoint.encryption.recipients"},
		{"send without a signing key", func(c *ShimConfiguration) { sender(c); c.Checkpoint.Signing.KeyFile = "" }, "needs checkpoint.signing.keyFile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			tc.edit(&c)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}
