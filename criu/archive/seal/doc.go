// Package seal encrypts and signs checkpoint archives as they are written,
// and verifies and decrypts them before anything reads their content.
//
// An archive at rest is either a plain tar (the default: kubelet's
// contract, which checkpointctl reads) or an age file (age-encryption.org/v1,
// X25519 recipients) of that tar, readable by the age command line tool
// with one of the recipients' identities. Either way the node that wrote it
// signs the bytes as stored with an ed25519 key, in a detached signature
// file beside the archive (SignatureSuffix): its node name, key id, the
// SHA-256 digest and size of the archive file, and when it was made.
//
// Open is the one way in: it checks the signature file against a trust
// Policy, hashes the archive and compares it with the signed digest before
// a byte of it is decrypted or unpacked, and only then hands out a reader
// of the plain tar. NewWriter is the one way out: a stream wrapper that
// encrypts to the recipients and hashes what it stores, and whose Seal
// writes the signature file once the archive is in place.
//
// Refusals wrap ErrUntrusted (of class errdefs.ErrInvalidArgument) or
// ErrNoIdentity (errdefs.ErrNotSupported: this node lacks the key) and
// name the archive.
package seal
