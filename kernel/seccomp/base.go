package seccomp

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// Errors of ResolveBase, for callers to branch on with errors.Is.
var (
	// ErrBaseCycle is wrapped when a profile's bases lead back to it.
	ErrBaseCycle = errdefs.New(errdefs.ErrInvalidArgument, "base profile cycle")
	// ErrBaseMissing is wrapped when a named base profile cannot be found.
	ErrBaseMissing = errdefs.New(errdefs.ErrNotFound, "base profile not found")
	// ErrBaseDepth is wrapped when a chain of bases is longer than
	// MaxBaseDepth.
	ErrBaseDepth = errdefs.New(errdefs.ErrInvalidArgument, "base profile chain too long")
)

// MaxBaseDepth is the longest chain of base profiles ResolveBase follows
// (a profile, its base, the base's base...): security-profiles-operator
// has no limit, but a chain longer than a few links is a mistake, and a
// limit keeps a hostile set from making the resolver read without end.
const MaxBaseDepth = 8

// BaseLoader returns the content of the base profile ref names, as the
// profile's baseProfileName field wrote it. A base that does not exist is
// an error wrapping ErrBaseMissing (or fs.ErrNotExist, which ResolveBase
// reports as missing too).
type BaseLoader func(ref string) ([]byte, error)

// BaseError is a base profile that cannot be resolved. Chain lists the
// profiles from the one being resolved to the failing reference, in the
// order they name each other.
type BaseError struct {
	Chain []string
	Err   error
}

func (e *BaseError) Error() string {
	return fmt.Sprintf("baseProfileName %s: %v", strings.Join(e.Chain, " -> "), e.Err)
}

func (e *BaseError) Unwrap() error { return e.Err }

// ResolveBase parses the profile data (named name, for the messages) with
// opts and, when it names a baseProfileName, loads the base with load,
// resolves the base's own base the same way, and returns the union
// (Union) with BaseProfileName cleared: what is installed and enforced.
// A profile without a base is returned as Parse returns it. A cycle, a
// missing base or a chain longer than MaxBaseDepth is a *BaseError naming
// the chain; an invalid base is a *BaseError wrapping Parse's errors.
func ResolveBase(name string, data []byte, opts ParseOptions, load BaseLoader) (*Profile, error) {
	return resolveBase([]string{name}, data, opts, load)
}

func resolveBase(chain []string, data []byte, opts ParseOptions, load BaseLoader) (*Profile, error) {
	p, err := Parse(data, opts)
	if err != nil {
		if len(chain) == 1 {
			return nil, err
		}
		return nil, &BaseError{Chain: chain, Err: err}
	}
	ref := p.BaseProfileName
	if ref == "" {
		return p, nil
	}
	next := append(slices.Clone(chain), ref)
	if slices.Contains(chain, ref) {
		return nil, &BaseError{Chain: next, Err: ErrBaseCycle}
	}
	if len(chain) > MaxBaseDepth {
		return nil, &BaseError{Chain: next, Err: fmt.Errorf("%w: more than %d links", ErrBaseDepth, MaxBaseDepth)}
	}
	if load == nil {
		return nil, &BaseError{Chain: next, Err: fmt.Errorf("%w: no base profiles can be loaded here", ErrBaseMissing)}
	}
	bdata, err := load(ref)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && !errors.Is(err, ErrBaseMissing) {
			err = fmt.Errorf("%w: %w", ErrBaseMissing, err)
		}
		return nil, &BaseError{Chain: next, Err: err}
	}
	base, err := resolveBase(next, bdata, opts, load)
	if err != nil {
		return nil, err
	}
	u := Union(base, p)
	u.Warnings = append(slices.Clone(p.Warnings), u.Warnings...)
	for _, w := range base.Warnings {
		u.Warnings = append(u.Warnings, Warning{Path: "base " + ref + ": " + w.Path, Message: w.Message})
	}
	if errs := u.checkConflicts(); len(errs) > 0 {
		return nil, &BaseError{Chain: next, Err: errors.Join(errs...)}
	}
	return u, nil
}

// Union is the profile own stacked on base, the way
// security-profiles-operator installs a profile that names a
// baseProfileName: own's default action (and errno, listener) decide what
// neither lists; the architectures and flags are both profiles'; the rules
// are base's followed by own's. Where both give the same syscall, with the
// same argument conditions, different verdicts, own's rule wins: the
// name is dropped from base's rule (security-profiles-operator merges the
// names per action and leaves such a name under both, which libseccomp
// then refuses or settles in an order the author cannot see). A rule
// repeated identically is kept once. base and own are not modified.
func Union(base, own *Profile) *Profile {
	u := &Profile{
		DefaultAction:    own.DefaultAction,
		DefaultErrnoRet:  own.DefaultErrnoRet,
		ListenerPath:     own.ListenerPath,
		ListenerMetadata: own.ListenerMetadata,
		Shape:            ShapeOCI,
	}
	if u.ListenerPath == "" {
		u.ListenerPath, u.ListenerMetadata = base.ListenerPath, base.ListenerMetadata
	}
	// No architectures means the native one, which the compiler always
	// adds: the union is both lists.
	u.Architectures = append(slices.Clone(base.Architectures), own.Architectures...)
	slices.Sort(u.Architectures)
	u.Architectures = slices.Compact(u.Architectures)
	for _, f := range append(slices.Clone(base.Flags), own.Flags...) {
		if !slices.Contains(u.Flags, f) {
			u.Flags = append(u.Flags, f)
		}
	}

	ownRule := map[string]Verdict{}
	for _, s := range own.Syscalls {
		key := argKey(s.Args)
		for _, n := range s.Names {
			if _, ok := ownRule[n+"|"+key]; !ok {
				ownRule[n+"|"+key] = s.Verdict()
			}
		}
	}
	seen := map[string]bool{}
	add := func(s Syscall, from string, skip func(string) bool) {
		key := argKey(s.Args)
		var names []string
		for _, n := range s.Names {
			k := n + "|" + key + "|" + s.Verdict().String()
			if seen[k] || skip(n+"|"+key) {
				continue
			}
			seen[k] = true
			names = append(names, n)
		}
		if len(names) == 0 {
			return
		}
		s.Names = names
		s.Args = slices.Clone(s.Args)
		s.Path = from + s.Path
		u.Syscalls = append(u.Syscalls, s)
	}
	for _, s := range base.Syscalls {
		v := s.Verdict()
		add(s, "base:", func(k string) bool {
			ov, ok := ownRule[k]
			return ok && ov != v
		})
	}
	for _, s := range own.Syscalls {
		add(s, "", func(string) bool { return false })
	}
	return u
}
