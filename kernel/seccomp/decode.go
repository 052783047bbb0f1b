package seccomp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/nodeshim/nodeshim/kernel/capability"
)

// document is a profile as written, in either shape, before it is resolved
// for a node.
type document struct {
	DefaultAction    Action
	hasDefaultAction bool
	DefaultErrnoRet  *uint
	Architectures    []string
	ArchMap          []archMap
	Flags            []Flag
	ListenerPath     string
	ListenerMetadata string
	BaseProfileName  string
	Syscalls         []docSyscall
	warnings         []Warning
}

type archMap struct {
	Arch      string
	SubArches []string
}

type docSyscall struct {
	Names     []string
	Action    Action
	hasAction bool
	ErrnoRet  *uint
	Args      []docArg
	Includes  filterSpec
	Excludes  filterSpec
	moby      bool // uses a field only the moby shape has
}

type docArg struct {
	Arg
	hasOp bool
}

type filterSpec struct {
	Arches    []string
	Caps      []string
	MinKernel capability.Version
}

// decoder walks JSON with json.RawMessage one level at a time so that every
// error and warning names its JSON path.
type decoder struct {
	errs  []error
	warns []Warning
	// names counts the syscall names of the rules decoded so far, against
	// MaxNames; overNames is set once that limit is passed.
	names     int
	overNames bool
}

func (d *decoder) fail(path string, err error) {
	d.errs = append(d.errs, &FieldError{Path: path, Err: err})
}

func isNull(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// object decodes raw as an object and calls field for each key in sorted
// order; keys field does not know become unknown-field warnings.
func (d *decoder) object(path string, raw json.RawMessage, field func(key, path string, v json.RawMessage) bool) bool {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		d.fail(path, fmt.Errorf("%w: want an object", ErrType))
		return false
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p := k
		if path != "" {
			p = path + "." + k
		}
		if !field(k, p, m[k]) {
			d.warns = append(d.warns, Warning{Path: p, Message: "unknown field, ignored"})
		}
	}
	return true
}

func (d *decoder) array(path string, raw json.RawMessage, elem func(i int, path string, v json.RawMessage)) {
	d.arrayMax(path, raw, 0, "", "", elem)
}

// arrayMax is array with at most max elements (none when max is 0): a
// longer array is a limit error naming limitName, and none of its
// elements is decoded.
func (d *decoder) arrayMax(path string, raw json.RawMessage, max int, what, limitName string, elem func(i int, path string, v json.RawMessage)) {
	if isNull(raw) {
		return
	}
	var a []json.RawMessage
	if err := json.Unmarshal(raw, &a); err != nil {
		d.fail(path, fmt.Errorf("%w: want an array", ErrType))
		return
	}
	if max > 0 && len(a) > max {
		d.errs = append(d.errs, limitError(path, what, len(a), max, limitName))
		return
	}
	for i, v := range a {
		elem(i, fmt.Sprintf("%s[%d]", path, i), v)
	}
}

func (d *decoder) str(path string, raw json.RawMessage) string {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		d.fail(path, fmt.Errorf("%w: want a string", ErrType))
	}
	return s
}

func (d *decoder) strings(path string, raw json.RawMessage) []string {
	var out []string
	// Fast path: a well-formed array of strings decodes in one call; only
	// a malformed one is walked element by element for the error's path.
	if err := json.Unmarshal(raw, &out); err == nil {
		return out
	}
	out = nil
	d.array(path, raw, func(_ int, p string, v json.RawMessage) {
		out = append(out, d.str(p, v))
	})
	return out
}

func (d *decoder) uint(path string, raw json.RawMessage, bits int) uint64 {
	var n json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err == nil {
		n, _ = v.(json.Number)
	}
	u, err := strconv.ParseUint(string(n), 10, bits)
	if n == "" || err != nil {
		d.fail(path, fmt.Errorf("%w: want an unsigned %d-bit integer", ErrType, bits))
		return 0
	}
	return u
}

func (d *decoder) optUint(path string, raw json.RawMessage) *uint {
	if isNull(raw) {
		return nil
	}
	u := uint(d.uint(path, raw, 32))
	return &u
}

// decodeDocument decodes a profile of either shape.
func decodeDocument(data []byte) (*document, error) {
	if err := checkShape(data); err != nil {
		return nil, err
	}
	if !json.Valid(data) {
		var v any
		err := json.Unmarshal(data, &v)
		path := syntaxPath(data)
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, &FieldError{Path: path, Err: fmt.Errorf("%w at byte %d: %v", ErrSyntax, se.Offset, err)}
		}
		return nil, &FieldError{Path: path, Err: fmt.Errorf("%w: %v", ErrSyntax, err)}
	}
	d := &decoder{}
	doc := &document{}
	d.object("", data, func(key, path string, v json.RawMessage) bool {
		switch key {
		case "defaultAction":
			doc.DefaultAction = Action(d.str(path, v))
			doc.hasDefaultAction = true
		case "defaultErrnoRet":
			doc.DefaultErrnoRet = d.optUint(path, v)
		case "architectures":
			doc.Architectures = d.strings(path, v)
		case "archMap":
			d.array(path, v, func(_ int, p string, v json.RawMessage) {
				var m archMap
				d.object(p, v, func(key, path string, v json.RawMessage) bool {
					switch key {
					case "architecture":
						m.Arch = d.str(path, v)
					case "subArchitectures":
						m.SubArches = d.strings(path, v)
					default:
						return false
					}
					return true
				})
				doc.ArchMap = append(doc.ArchMap, m)
			})
		case "flags":
			for _, f := range d.strings(path, v) {
				doc.Flags = append(doc.Flags, Flag(f))
			}
		case "listenerPath":
			doc.ListenerPath = d.str(path, v)
		case "listenerMetadata":
			doc.ListenerMetadata = d.str(path, v)
		case "baseProfileName":
			doc.BaseProfileName = d.str(path, v)
		case "syscalls":
			d.arrayMax(path, v, MaxRules, "rules", "MaxRules", func(_ int, p string, v json.RawMessage) {
				if d.overNames {
					return
				}
				s := d.syscall(p, v)
				d.names += len(s.Names)
				if d.names > MaxNames {
					d.overNames = true
					d.errs = append(d.errs, limitError(p+".names", "syscall names up to here", d.names, MaxNames, "MaxNames"))
					return
				}
				doc.Syscalls = append(doc.Syscalls, s)
			})
		default:
			return false
		}
		return true
	})
	doc.warnings = d.warns
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	return doc, nil
}

func (d *decoder) syscall(path string, raw json.RawMessage) docSyscall {
	var s docSyscall
	var name string
	hasName := false
	d.object(path, raw, func(key, p string, v json.RawMessage) bool {
		switch key {
		case "names":
			s.Names = append(s.Names, d.strings(p, v)...)
		case "name":
			// The moby shape's older single-name form.
			name = d.str(p, v)
			hasName = true
			s.moby = true
		case "action":
			s.Action = Action(d.str(p, v))
			s.hasAction = true
		case "errnoRet":
			s.ErrnoRet = d.optUint(p, v)
		case "args":
			d.arrayMax(p, v, MaxArgs, "comparisons", "MaxArgs", func(_ int, p string, v json.RawMessage) {
				s.Args = append(s.Args, d.arg(p, v))
			})
		case "includes":
			s.Includes = d.filter(p, v)
			s.moby = true
		case "excludes":
			s.Excludes = d.filter(p, v)
			s.moby = true
		case "comment":
			s.moby = true
		default:
			return false
		}
		return true
	})
	if hasName {
		if len(s.Names) > 0 {
			d.fail(path+".name", errors.New("both name and names are set"))
		}
		s.Names = append(s.Names, name)
	}
	return s
}

func (d *decoder) arg(path string, raw json.RawMessage) docArg {
	var a docArg
	d.object(path, raw, func(key, p string, v json.RawMessage) bool {
		switch key {
		case "index":
			a.Index = uint(d.uint(p, v, 32))
		case "value":
			a.Value = d.uint(p, v, 64)
		case "valueTwo":
			a.ValueTwo = d.uint(p, v, 64)
		case "op":
			a.Op = Op(d.str(p, v))
			a.hasOp = true
		default:
			return false
		}
		return true
	})
	return a
}

func (d *decoder) filter(path string, raw json.RawMessage) filterSpec {
	var f filterSpec
	if isNull(raw) {
		return f
	}
	d.object(path, raw, func(key, p string, v json.RawMessage) bool {
		switch key {
		case "arches":
			f.Arches = d.strings(p, v)
		case "caps":
			f.Caps = d.strings(p, v)
		case "minKernel":
			s := d.str(p, v)
			if s == "" {
				return true
			}
			k, err := parseKernelVersion(s)
			if err != nil {
				d.fail(p, err)
			}
			f.MinKernel = k
		default:
			return false
		}
		return true
	})
	return f
}

// syntaxPath returns the JSON path of the place where data stops being
// valid JSON: the member or element being read when the tokenizer failed
// ("syscalls[1].names[2]" for a stray comma after names[1]), or "" at the
// top level. The path uses the same notation as every other FieldError.
func syntaxPath(data []byte) string {
	type frame struct {
		array   bool
		n       int    // in an array: the index of the element being read
		key     string // in an object: the member being read, when haveKey
		haveKey bool
	}
	var stack []frame
	path := func() string {
		var b strings.Builder
		for _, f := range stack {
			switch {
			case f.array:
				fmt.Fprintf(&b, "[%d]", f.n)
			case f.haveKey:
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(f.key)
			}
		}
		return b.String()
	}
	// valueDone moves the innermost container past the value just read.
	valueDone := func() {
		if len(stack) == 0 {
			return
		}
		top := &stack[len(stack)-1]
		if top.array {
			top.n++
		} else {
			top.haveKey = false
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err != nil {
			if errors.Is(err, io.EOF) && len(stack) == 0 {
				return "" // several top-level values, or trailing garbage
			}
			return path()
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				stack = append(stack, frame{array: v == '['})
			case '}', ']':
				stack = stack[:len(stack)-1]
				valueDone()
			}
		case string:
			if top := len(stack) - 1; top >= 0 && !stack[top].array && !stack[top].haveKey {
				stack[top].key, stack[top].haveKey = v, true
				continue
			}
			valueDone()
		default:
			valueDone()
		}
	}
}
