package seccomp

import (
	"errors"
	"fmt"
)

// Bounds on a profile's input. Parse refuses a profile beyond any of them
// with a *FieldError wrapping ErrLimit that names the limit, before any
// work that grows with the input: a profile comes from a file or a
// configuration a node agent reads with privilege, so its size must not
// decide how long nodeshim works on it. Real profiles are far below them:
// the Docker and containerd default profiles are about 30 KiB, with about
// 60 rules, 420 names, at most 3 comparisons a rule, nested 5 levels deep.
const (
	// MaxProfileBytes is the largest profile accepted, in bytes: kubelet
	// reads a Localhost profile whole, and a ConfigMap holds 1 MiB.
	MaxProfileBytes = 1 << 20
	// MaxDepth is how deeply arrays and objects may nest (a profile needs
	// 5: syscalls[].args[] of objects).
	MaxDepth = 16
	// MaxRules is the most entries "syscalls" may have.
	MaxRules = 16384
	// MaxNames is the most syscall names all rules may list together,
	// repeats included (a repeat costs nothing once parsed: Compile
	// hands each distinct rule to libseccomp once).
	MaxNames = 1 << 17
	// MaxArgs is the most argument comparisons one rule may have: each
	// distinct one takes a BPF instruction at least, and a program holds
	// 4096.
	MaxArgs = maxInstructions
)

// ErrLimit is wrapped, in a *FieldError naming where, by the errors of a
// profile beyond one of the bounds above.
var ErrLimit = errors.New("profile exceeds a limit")

// limitError is the *FieldError of a count beyond a limit; name is the
// limit's exported name, which the message gives.
func limitError(path, what string, n, max int, name string) error {
	return &FieldError{Path: path, Err: fmt.Errorf("%w: %d %s, more than the %d of seccomp.%s", ErrLimit, n, what, max, name)}
}

// checkShape refuses data larger than MaxProfileBytes or nested deeper
// than MaxDepth, in one pass that reads each byte once; it judges only
// what it bounds, so a profile that is not JSON goes on to the decoder's
// error.
func checkShape(data []byte) error {
	if len(data) > MaxProfileBytes {
		return limitError("", "bytes", len(data), MaxProfileBytes, "MaxProfileBytes")
	}
	depth := 0
	inString, escaped := false, false
	for _, c := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			if depth > MaxDepth {
				return &FieldError{Err: fmt.Errorf("%w: arrays and objects nested more than %d deep (seccomp.MaxDepth)", ErrLimit, MaxDepth)}
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return nil
}
