package seccomp

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// FuzzDisassemble decodes arbitrary bytes as a BPF program (what
// `seccomp compile -o` writes) and disassembles it: it must never panic,
// and a decoded program re-encodes to the same bytes.
func FuzzDisassemble(f *testing.F) {
	f.Add(EncodeProgram(enosysStub([]stubArch{{Name: "amd64", AuditArch: 0xc000003e, MaxNr: 456, X32Bit: true}})))
	f.Add([]byte{0x06, 0, 0, 0, 0, 0, 0xff, 0x7f})
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		prog, err := DecodeProgram(data)
		if err != nil {
			return
		}
		if string(EncodeProgram(prog)) != string(data) {
			t.Fatal("round trip changed the program")
		}
		if got := strings.Count(Disassemble(prog), "\n"); got != len(prog) {
			t.Fatalf("%d lines for %d instructions", got, len(prog))
		}
	})
}

// FuzzParseRelease reads arbitrary kernel release strings.
func FuzzParseRelease(f *testing.F) {
	for _, s := range []string{"6.18.44-fc-v769", "5.15.0-91-generic", "4.8", "", "1.2.3.4", "99999999999999999999.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseRelease(s)
		if err == nil && (v.Major < 0 || v.Minor < 0 || v.Patch < 0) {
			t.Fatalf("%q: %v", s, v)
		}
	})
}

// FuzzCheckShape: the one-pass bound on nesting agrees with the JSON
// decoder's own depth for every valid document, and is never fooled by
// brackets inside strings.
func FuzzCheckShape(f *testing.F) {
	f.Add([]byte(`{"a":[[["]]]]"]]]}`))
	f.Add([]byte(`["\\\"[[[[[["]`))
	f.Add([]byte(strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > MaxProfileBytes || !json.Valid(data) {
			return
		}
		depth, deepest := 0, 0
		dec := json.NewDecoder(bytes.NewReader(data))
		for {
			tok, err := dec.Token()
			if err != nil {
				break
			}
			switch tok {
			case json.Delim('{'), json.Delim('['):
				depth++
				deepest = max(deepest, depth)
			case json.Delim('}'), json.Delim(']'):
				depth--
			}
		}
		err := checkShape(data)
		if (deepest > MaxDepth) != errors.Is(err, ErrLimit) {
			t.Fatalf("depth %d: checkShape = %v", deepest, err)
		}
	})
}
