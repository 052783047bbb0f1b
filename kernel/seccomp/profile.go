package seccomp

import (
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/nodeshim/nodeshim/kernel/capability"
)

// Errors that Parse wraps in a *FieldError, for callers to branch on with
// errors.Is.
var (
	ErrSyntax        = errors.New("malformed JSON")
	ErrType          = errors.New("wrong type")
	ErrMissing       = errors.New("missing")
	ErrUnknownAction = errors.New("unknown action")
	ErrUnknownOp     = errors.New("unknown comparison operator")
	ErrUnknownFlag   = errors.New("unknown flag")
	ErrUnknownArch   = errors.New("unknown architecture")
	ErrArgIndex      = errors.New("argument index out of range 0-5")
	ErrErrnoRet      = errors.New("errnoRet not allowed")
	ErrNotify        = errors.New("SCMP_ACT_NOTIFY not allowed")
	ErrConflict      = errors.New("conflicting rules")
)

// FieldError is a validation error at one place of the profile JSON. Path
// is a JSON path such as "syscalls[12].args[0].op" ("" for the document).
type FieldError struct {
	Path string
	Err  error
}

func (e *FieldError) Error() string {
	if e.Path == "" {
		return e.Err.Error()
	}
	return e.Path + ": " + e.Err.Error()
}

func (e *FieldError) Unwrap() error { return e.Err }

// Warning is something Parse or Compile accepted but the operator should
// know: an unknown field (a likely typo), a syscall name skipped because
// libseccomp or this architecture does not know it, a rule dropped by the
// Docker profile's includes/excludes.
type Warning struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

func (w Warning) String() string {
	if w.Path == "" {
		return w.Message
	}
	return w.Path + ": " + w.Message
}

// Shape names the input format of a profile.
type Shape string

// The accepted profile shapes.
const (
	ShapeOCI  Shape = "oci"
	ShapeMoby Shape = "moby"
)

// Profile is a seccomp profile in the OCI runtime-spec form, resolved for one
// node when it came in the Docker/moby shape.
type Profile struct {
	DefaultAction Action `json:"defaultAction"`
	// DefaultErrnoRet is the errno of an ERRNO default action; nil means
	// EPERM, as runc does.
	DefaultErrnoRet  *uint    `json:"defaultErrnoRet,omitempty"`
	Architectures    []string `json:"architectures,omitempty"`
	Flags            []Flag   `json:"flags,omitempty"`
	ListenerPath     string   `json:"listenerPath,omitempty"`
	ListenerMetadata string   `json:"listenerMetadata,omitempty"`
	// BaseProfileName names the profile this one extends
	// (security-profiles-operator's field): ResolveBase installs the
	// union of both. Parse keeps it; the runtimes ignore it.
	BaseProfileName string    `json:"baseProfileName,omitempty"`
	Syscalls        []Syscall `json:"syscalls,omitempty"`

	// Shape is the format the profile was read from.
	Shape Shape `json:"-"`
	// Warnings lists what Parse accepted with a remark.
	Warnings []Warning `json:"-"`
}

// Syscall is one rule of a profile: an action for a set of syscall names,
// optionally only when all argument comparisons hold.
type Syscall struct {
	Names    []string `json:"names"`
	Action   Action   `json:"action"`
	ErrnoRet *uint    `json:"errnoRet,omitempty"`
	Args     []Arg    `json:"args,omitempty"`

	// Path is where the rule was in the input, e.g. "syscalls[12]".
	Path string `json:"-"`
}

// Arg is one argument comparison of a rule.
type Arg struct {
	Index    uint   `json:"index"`
	Value    uint64 `json:"value"`
	ValueTwo uint64 `json:"valueTwo,omitempty"`
	Op       Op     `json:"op"`
}

// DefaultVerdict is what the default action does.
func (p *Profile) DefaultVerdict() Verdict {
	return verdictOf(p.DefaultAction, p.DefaultErrnoRet)
}

// Verdict is what the rule does when it matches.
func (s *Syscall) Verdict() Verdict { return verdictOf(s.Action, s.ErrnoRet) }

func verdictOf(a Action, errno *uint) Verdict {
	switch {
	case a == ActKill:
		a = ActKillThread
	case a == ActErrno && errno == nil:
		return Verdict{Action: a, Errno: 1} // EPERM, runc's default
	}
	if a.TakesErrno() && errno != nil {
		return Verdict{Action: a, Errno: *errno}
	}
	return Verdict{Action: a}
}

// maxErrno is the largest errno the kernel passes through for
// SECCOMP_RET_ERRNO (it caps the 16-bit data at MAX_ERRNO, 4095).
const maxErrno = 4095

// ParseOptions describe the node a Docker/moby-shaped profile is resolved
// for. OCI-shaped profiles do not depend on them.
type ParseOptions struct {
	// Arch is the Go architecture name matched against includes/excludes
	// arches ("amd64", "arm64"...); empty means runtime.GOARCH.
	Arch string
	// Caps is the container's capability set (CAP_...) matched against
	// includes/excludes caps; nil means DefaultCaps.
	Caps []string
	// Kernel is the running kernel's version matched against
	// includes.minKernel; zero means unknown, and rules that need a minimum
	// kernel are then dropped with a warning.
	Kernel capability.Version
}

// DefaultCaps is the capability set containerd and Docker give a container
// that asks for no other.
var DefaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// goToSeccompArch maps Go architecture names to the SCMP_ARCH_ names used
// in a moby profile's archMap.
var goToSeccompArch = map[string]string{
	"386": "SCMP_ARCH_X86", "amd64": "SCMP_ARCH_X86_64", "arm": "SCMP_ARCH_ARM", "arm64": "SCMP_ARCH_AARCH64",
	"mips64": "SCMP_ARCH_MIPS64", "mips64le": "SCMP_ARCH_MIPSEL64", "mips": "SCMP_ARCH_MIPS",
	"mipsle": "SCMP_ARCH_MIPSEL", "ppc64": "SCMP_ARCH_PPC64", "ppc64le": "SCMP_ARCH_PPC64LE",
	"riscv64": "SCMP_ARCH_RISCV64", "s390x": "SCMP_ARCH_S390X", "loong64": "SCMP_ARCH_LOONGARCH64",
}

// SCMPArch returns the SCMP_ARCH_ name of the Go architecture goarch
// (runtime.GOARCH for the running binary), e.g. SCMP_ARCH_X86_64 for amd64:
// the architecture whose syscall numbers the kernel sees from this process.
func SCMPArch(goarch string) (string, error) {
	if a, ok := goToSeccompArch[goarch]; ok {
		return a, nil
	}
	return "", fmt.Errorf("%w: no seccomp architecture for GOARCH %s", ErrUnknownArch, goarch)
}

// knownArches are the architecture names accepted in "architectures".
var knownArches = map[string]bool{
	"SCMP_ARCH_X86": true, "SCMP_ARCH_X86_64": true, "SCMP_ARCH_X32": true, "SCMP_ARCH_ARM": true,
	"SCMP_ARCH_AARCH64": true, "SCMP_ARCH_MIPS": true, "SCMP_ARCH_MIPS64": true, "SCMP_ARCH_MIPS64N32": true,
	"SCMP_ARCH_MIPSEL": true, "SCMP_ARCH_MIPSEL64": true, "SCMP_ARCH_MIPSEL64N32": true,
	"SCMP_ARCH_PPC": true, "SCMP_ARCH_PPC64": true, "SCMP_ARCH_PPC64LE": true, "SCMP_ARCH_S390": true,
	"SCMP_ARCH_S390X": true, "SCMP_ARCH_PARISC": true, "SCMP_ARCH_PARISC64": true,
	"SCMP_ARCH_RISCV64": true, "SCMP_ARCH_LOONGARCH64": true, "SCMP_ARCH_M68K": true, "SCMP_ARCH_SH": true,
	"SCMP_ARCH_SHEB": true,
}

// Parse decodes and validates a seccomp profile in the OCI or the
// Docker/moby shape and resolves it for the node described by opts. Every
// validation error is a *FieldError naming the JSON path; when there are
// several they are joined (errors.Join) in document order.
func Parse(data []byte, opts ParseOptions) (*Profile, error) {
	doc, err := decodeDocument(data)
	if err != nil {
		return nil, err
	}
	return resolve(doc, opts)
}

func resolve(doc *document, opts ParseOptions) (*Profile, error) {
	var errs []error
	fail := func(path string, err error) { errs = append(errs, &FieldError{Path: path, Err: err}) }
	p := &Profile{
		DefaultAction:    doc.DefaultAction,
		DefaultErrnoRet:  doc.DefaultErrnoRet,
		Flags:            doc.Flags,
		ListenerPath:     doc.ListenerPath,
		ListenerMetadata: doc.ListenerMetadata,
		BaseProfileName:  doc.BaseProfileName,
		Shape:            ShapeOCI,
		Warnings:         doc.warnings,
	}
	arch := opts.Arch
	if arch == "" {
		arch = runtime.GOARCH
	}
	caps := opts.Caps
	if caps == nil {
		caps = DefaultCaps
	}

	switch {
	case !doc.hasDefaultAction:
		fail("defaultAction", ErrMissing)
	case !doc.DefaultAction.Valid():
		fail("defaultAction", fmt.Errorf("%w %q", ErrUnknownAction, string(doc.DefaultAction)))
	case doc.DefaultAction == ActNotify:
		fail("defaultAction", fmt.Errorf("%w as the default action", ErrNotify))
	}
	if doc.DefaultErrnoRet != nil {
		if doc.DefaultAction.Valid() && !doc.DefaultAction.TakesErrno() {
			fail("defaultErrnoRet", fmt.Errorf("%w with %s", ErrErrnoRet, doc.DefaultAction))
		} else if *doc.DefaultErrnoRet > maxErrno {
			fail("defaultErrnoRet", fmt.Errorf("%w: %d is above %d", ErrErrnoRet, *doc.DefaultErrnoRet, maxErrno))
		}
	}
	for i, f := range doc.Flags {
		if _, err := f.Bits(); err != nil {
			fail(fmt.Sprintf("flags[%d]", i), err)
		}
	}

	if len(doc.ArchMap) > 0 {
		p.Shape = ShapeMoby
		if len(doc.Architectures) > 0 {
			fail("archMap", errors.New("both architectures and archMap are set"))
		}
		native := goToSeccompArch[arch]
		for i, m := range doc.ArchMap {
			if !knownArches[m.Arch] {
				fail(fmt.Sprintf("archMap[%d].architecture", i), fmt.Errorf("%w %q", ErrUnknownArch, m.Arch))
			}
			for j, s := range m.SubArches {
				if !knownArches[s] {
					fail(fmt.Sprintf("archMap[%d].subArchitectures[%d]", i, j), fmt.Errorf("%w %q", ErrUnknownArch, s))
				}
			}
			if m.Arch == native {
				p.Architectures = append(p.Architectures, m.Arch)
				p.Architectures = append(p.Architectures, m.SubArches...)
			}
		}
	} else {
		for i, a := range doc.Architectures {
			if !knownArches[a] {
				fail(fmt.Sprintf("architectures[%d]", i), fmt.Errorf("%w %q", ErrUnknownArch, a))
			}
		}
		p.Architectures = doc.Architectures
	}

	hasNotify := false
	for i, s := range doc.Syscalls {
		path := fmt.Sprintf("syscalls[%d]", i)
		if s.moby {
			p.Shape = ShapeMoby
		}
		if !s.hasAction {
			fail(path+".action", ErrMissing)
		} else if !s.Action.Valid() {
			fail(path+".action", fmt.Errorf("%w %q", ErrUnknownAction, string(s.Action)))
		}
		if s.ErrnoRet != nil {
			if s.Action.Valid() && !s.Action.TakesErrno() {
				fail(path+".errnoRet", fmt.Errorf("%w with %s", ErrErrnoRet, s.Action))
			} else if *s.ErrnoRet > maxErrno {
				fail(path+".errnoRet", fmt.Errorf("%w: %d is above %d", ErrErrnoRet, *s.ErrnoRet, maxErrno))
			}
		}
		if len(s.Names) == 0 {
			fail(path+".names", ErrMissing)
		}
		for j, n := range s.Names {
			if n == "" {
				fail(fmt.Sprintf("%s.names[%d]", path, j), fmt.Errorf("%w: empty syscall name", ErrMissing))
			}
			if s.Action == ActNotify && n == "write" {
				// runc refuses it: the seccomp agent's own logging would
				// deadlock against the notification it is handling.
				fail(fmt.Sprintf("%s.names[%d]", path, j), fmt.Errorf("%w on write", ErrNotify))
			}
		}
		for j, a := range s.Args {
			apath := fmt.Sprintf("%s.args[%d]", path, j)
			if a.Index > 5 {
				fail(apath+".index", fmt.Errorf("%w: %d", ErrArgIndex, a.Index))
			}
			if !a.hasOp {
				fail(apath+".op", ErrMissing)
			} else if !a.Op.Valid() {
				fail(apath+".op", fmt.Errorf("%w %q", ErrUnknownOp, string(a.Op)))
			}
		}
		if s.Action == ActNotify {
			hasNotify = true
		}
		if reason, keep := s.applies(arch, caps, opts.Kernel); !keep {
			p.Warnings = append(p.Warnings, Warning{Path: path, Message: "not applied on this node: " + reason})
			continue
		}
		args := make([]Arg, len(s.Args))
		for j, a := range s.Args {
			args[j] = a.Arg
		}
		p.Syscalls = append(p.Syscalls, Syscall{Names: s.Names, Action: s.Action, ErrnoRet: s.ErrnoRet, Args: args, Path: path})
	}
	if hasNotify && p.ListenerPath == "" {
		fail("listenerPath", fmt.Errorf("%w: SCMP_ACT_NOTIFY needs a listenerPath", ErrMissing))
	}
	if len(errs) == 0 {
		errs = append(errs, p.checkConflicts()...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// applies evaluates a moby rule's includes/excludes for a node.
func (s *docSyscall) applies(arch string, caps []string, k capability.Version) (string, bool) {
	has := func(list []string, v string) bool {
		for _, x := range list {
			if x == v {
				return true
			}
		}
		return false
	}
	if has(s.Excludes.Arches, arch) {
		return "excluded on " + arch, false
	}
	for _, c := range s.Excludes.Caps {
		if has(caps, c) {
			return "excluded with " + c, false
		}
	}
	if len(s.Includes.Arches) > 0 && !has(s.Includes.Arches, arch) {
		return "only for " + strings.Join(s.Includes.Arches, ","), false
	}
	for _, c := range s.Includes.Caps {
		if !has(caps, c) {
			return "needs " + c, false
		}
	}
	if !s.Includes.MinKernel.IsZero() {
		if k.IsZero() {
			return "needs kernel " + s.Includes.MinKernel.String() + " and the kernel version is unknown", false
		}
		if !k.AtLeast(s.Includes.MinKernel) {
			return "needs kernel " + s.Includes.MinKernel.String(), false
		}
	}
	return "", true
}

// argKey renders a rule's comparisons canonically (sorted), so that two
// rules with the same conditions in another order compare equal.
func argKey(args []Arg) string {
	parts := make([]string, len(args))
	for i, a := range args {
		parts[i] = fmt.Sprintf("%d:%s:%d:%d", a.Index, a.Op, a.Value, a.ValueTwo)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// checkConflicts finds the same syscall with the same conditions listed
// with two different verdicts: which one libseccomp keeps is not what the
// author can know, so it is an error. Identical duplicates are a warning,
// one for each syscall and conditions however often they repeat. The work
// is linear in the names: one map lookup each. Conflicts are reported
// once for each syscall and conditions too.
func (p *Profile) checkConflicts() []error {
	type seen struct {
		path string
		v    Verdict
		// warning is the index in p.Warnings of the repeat warning, -1
		// before the first repeat; repeats counts them.
		warning, repeats int
		// conflict is set once a conflict with this one is reported.
		conflict bool
	}
	first := map[string]*seen{}
	var errs []error
	var repeated []*seen
	for _, s := range p.Syscalls {
		key := argKey(s.Args)
		v := s.Verdict()
		for j, n := range s.Names {
			k := n + "|" + key
			prev, ok := first[k]
			switch {
			case !ok:
				first[k] = &seen{path: fmt.Sprintf("%s.names[%d]", s.Path, j), v: v, warning: -1}
			case prev.v != v:
				if prev.conflict {
					continue // one error a syscall and conditions
				}
				prev.conflict = true
				errs = append(errs, &FieldError{Path: fmt.Sprintf("%s.names[%d]", s.Path, j), Err: fmt.Errorf("%w: %q is %s here and %s at %s", ErrConflict, n, v, prev.v, prev.path)})
			default:
				prev.repeats++
				if prev.warning < 0 {
					prev.warning = len(p.Warnings)
					repeated = append(repeated, prev)
					p.Warnings = append(p.Warnings, Warning{Path: fmt.Sprintf("%s.names[%d]", s.Path, j), Message: fmt.Sprintf("%q is listed again with the same rule (first at %s)", n, prev.path)})
				}
			}
		}
	}
	for _, r := range repeated {
		if r.repeats > 1 {
			p.Warnings[r.warning].Message += fmt.Sprintf(", %d repeats in all", r.repeats)
		}
	}
	return errs
}

// parseKernelVersion reads "4.8" or "5.10.2" as used by moby's minKernel.
func parseKernelVersion(s string) (capability.Version, error) {
	var v capability.Version
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 2 {
		return v, fmt.Errorf("kernel version %q: want MAJOR.MINOR", s)
	}
	nums := []*int{&v.Major, &v.Minor, &v.Patch}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return capability.Version{}, fmt.Errorf("kernel version %q: %q is not a number", s, p)
		}
		*nums[i] = n
	}
	return v, nil
}

// ParseRelease reads the version at the start of a kernel release string as
// uname(2) reports it, e.g. "6.18.44-fc-v769".
func ParseRelease(release string) (capability.Version, error) {
	end := 0
	dots := 0
	for end < len(release) {
		c := release[end]
		if c == '.' {
			dots++
			if dots == 3 {
				break
			}
		} else if c < '0' || c > '9' {
			break
		}
		end++
	}
	return parseKernelVersion(strings.TrimSuffix(release[:end], "."))
}
