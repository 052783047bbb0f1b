package bpf

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
)

// verifierTailLines is how many lines of a verifier log a LoadError keeps:
// the verifier states the reason for a rejection at the end of its log.
const verifierTailLines = 12

// LoadError is returned when the kernel rejects one of nodeshim's programs
// or maps. It names the object and keeps the last lines of the verifier log.
type LoadError struct {
	// Object names the program or collection that failed, e.g. "recorder".
	Object string
	// VerifierTail holds the last lines of the verifier log, if the kernel
	// gave one.
	VerifierTail []string
	// Err is the underlying error from cilium/ebpf.
	Err error
}

// Error renders the object, the cause and the tail of the verifier log.
func (e *LoadError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "load %s: %v", e.Object, e.Err)
	if len(e.VerifierTail) > 0 {
		b.WriteString("; verifier log (last lines):\n\t")
		b.WriteString(strings.Join(e.VerifierTail, "\n\t"))
	}
	return b.String()
}

// Unwrap returns the cilium/ebpf error, so that errors.As finds an
// *ebpf.VerifierError and errors.Is finds ebpf.ErrNotSupported.
func (e *LoadError) Unwrap() error { return e.Err }

// newLoadError wraps err from loading object; nil stays nil.
func newLoadError(object string, err error) error {
	if err == nil {
		return nil
	}
	le := &LoadError{Object: object, Err: err}
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		le.VerifierTail = tail(ve.Log, verifierTailLines)
	}
	return le
}

// tail returns the last n non-empty lines of log.
func tail(log []string, n int) []string {
	var out []string
	for i := len(log) - 1; i >= 0 && len(out) < n; i-- {
		if l := strings.TrimSpace(log[i]); l != "" {
			out = append(out, l)
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}
