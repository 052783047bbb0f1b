// Package transfer moves a pod checkpoint from one node's shim to
// another's, without a registry: node A's shim streams the pod
// checkpoint's files as one tar, encrypted to node B's age recipient and
// signed with A's ed25519 key as it is written (criu/archive/seal), over
// mutual TLS in which each side presents its node's own certificate; the
// signature travels as an HTTP trailer once the last byte is sent.
//
// Node B's shim serves PUT /transfers/{name} (Receiver) on its TLS
// listener. It accepts a sender only with a client certificate that the
// TLS handshake verified against its client CAs, and takes the sender's
// node name from that certificate (CommonName "system:node:NAME", as
// kubelet's client certificates name a node, or "NAME"). It writes the
// stream into a work entry of its checkpoint directory (criu/workentry: a
// crash leaves a left-over that retention removes), bounded in size and
// refused up front when the disk lacks room, then verifies before it
// trusts a byte: the signature against B's trust policy (seal.Open: a
// trusted key for the signing node, the digest and size of the bytes as
// received), the signer being the node of the client certificate, the
// stream being encrypted to one of B's identities. Only then is it
// decrypted and unpacked (plain files only, names checked, the expanded
// size bounded), its manifest checked (criu/pod), and the pod checkpoint
// renamed into the checkpoint directory under its name, never over
// another (renameat2 RENAME_NOREPLACE), the directory fsynced. Every
// failure removes the work entry: a transfer refused or cut mid-way
// leaves nothing.
//
// Send is the sending half; cmd/ and the API wire both.
package transfer
