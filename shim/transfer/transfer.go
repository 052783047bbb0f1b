package transfer

import (
	"strings"

	"github.com/nodeshim/nodeshim/criu/pod"
)

// Pattern is the route of a transfer on the receiving shim's API.
const Pattern = "PUT /transfers/{name}"

// Path returns the path of the transfer of the pod checkpoint name.
func Path(name string) string { return "/transfers/" + name }

// The HTTP header and trailer of a transfer.
const (
	// HeaderSignature is the trailer that carries the stream's seal
	// signature (seal.Signature's JSON, standard base64), sent once the
	// last byte is: the digest is known only then.
	HeaderSignature = "Nodeshim-Signature"
	// HeaderSize declares the pod checkpoint's plain size in bytes, so
	// that the receiver refuses one too large for its bound or its disk
	// before a byte is written; the received bytes are bounded anyway.
	HeaderSize = "Nodeshim-Size"
)

// nodePrefix starts the CommonName of a node's certificate, as kubelet's
// client certificates name a node (system:node:NAME).
const nodePrefix = "system:node:"

// NodeOf returns the node a client certificate's CommonName names:
// "system:node:NAME" or "NAME"; "" for an empty name.
func NodeOf(commonName string) string {
	return strings.TrimPrefix(commonName, nodePrefix)
}

// validName reports whether name is a pod checkpoint's name (criu/pod's
// Name), the only thing a transfer stores.
func validName(name string) bool {
	_, _, _, _, ok := pod.ParseName(name)
	return ok && len(name) <= 255
}
