package main

import (
	"github.com/spf13/pflag"

	"github.com/nodeshim/nodeshim/criu/archive/seal"
)

// sealFlags are the encryption, signing and trust flags of checkpoint,
// restore and checkpoint image; they mean what the configuration's
// checkpoint.encryption, checkpoint.signing and checkpoint.trustPolicy
// mean (docs/security.md).
type sealFlags struct {
	c seal.Config
}

// sealFlagNames name the flags in errors.
var sealFlagNames = seal.FieldNames{Recipients: "--recipient", Identities: "--identity", SigningKey: "--signing-key", Node: "--node-name", TrustPolicy: "--trust-policy"}

// addWrite adds the flags that seal an archive being written.
func (f *sealFlags) addWrite(fl *pflag.FlagSet) {
	fl.StringArrayVar(&f.c.Recipients, "recipient", nil, "encrypt the archive to this age recipient (age1...) or the recipients in this file; repeatable; plain when none")
	fl.StringVar(&f.c.SigningKey, "signing-key", "", "sign the archive with this ed25519 key (PEM PKCS #8 file); writes ARCHIVE.sig")
	fl.StringVar(&f.c.Node, "node-name", "", "node name recorded in the signature (default: the host name)")
}

// addRead adds the flags that verify and decrypt an archive being read.
func (f *sealFlags) addRead(fl *pflag.FlagSet, decrypt bool) {
	if decrypt {
		fl.StringArrayVar(&f.c.Identities, "identity", nil, "age identity file, or directory of them, that decrypts encrypted archives; repeatable")
	}
	fl.StringVar(&f.c.TrustPolicy, "trust-policy", "", "verify the archive's signature against this trust policy file before reading it")
}

// load reads the keys and the policy the flags name.
func (f *sealFlags) load() (seal.WriteOptions, seal.OpenOptions, error) {
	return f.c.Load(sealFlagNames)
}
