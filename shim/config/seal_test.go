package config

import (
	"strings"
	"testing"

	"filippo.io/age"
)

// TestCheckpointSealingValidated: the encryption, signing and trust
// policy fields are checked without reading a file, each problem naming
// its field; so is the number of pre-dump rounds.
func TestCheckpointSealingValidated(t *testing.T) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Checkpoints)
		want string // "" means valid
	}{
		{"all set", func(c *Checkpoints) {
			c.Encryption = CheckpointEncryption{Recipients: []string{id.Recipient().String(), "/etc/nodeshim/recipients"}, Identities: []string{"/etc/nodeshim/keys"}}
			c.Signing = CheckpointSigning{KeyFile: "/etc/nodeshim/node.key", NodeName: "node-a"}
			c.TrustPolicy = "/etc/nodeshim/trust.yaml"
		}, ""},
		{"bad recipient", func(c *Checkpoints) { c.Encryption.Recipients = []string{"age1bad"} }, "checkpoint.encryption.recipients"},
		{"relative recipients file", func(c *Checkpoints) { c.Encryption.Recipients = []string{"recipients"} }, "checkpoint.encryption.recipients"},
		{"relative identity", func(c *Checkpoints) { c.Encryption.Identities = []string{"keys"} }, "checkpoint.encryption.identities"},
		{"relative key file", func(c *Checkpoints) { c.Signing.KeyFile = "node.key" }, "checkpoint.signing.keyFile"},
		{"bad node name", func(c *Checkpoints) { c.Signing.NodeName = "Node_A" }, "checkpoint.signing.nodeName"},
		{"relative policy", func(c *Checkpoints) { c.TrustPolicy = "trust.yaml" }, "checkpoint.trustPolicy"},
		{"pre-dump rounds", func(c *Checkpoints) { c.PreDumpRounds = MaxPreDumpRounds }, ""},
		{"negative pre-dump rounds", func(c *Checkpoints) { c.PreDumpRounds = -1 }, "checkpoint.preDumpRounds -1: want 0 to 8"},
		{"too many pre-dump rounds", func(c *Checkpoints) { c.PreDumpRounds = MaxPreDumpRounds + 1 }, "checkpoint.preDumpRounds 9: want 0 to 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			tc.edit(&c.Checkpoint)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %s", err, tc.want)
			}
		})
	}
}
