package seccomp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// Optimize selects how libseccomp lays out the filter.
type Optimize int

// Optimization levels (libseccomp's SCMP_FLTATR_CTL_OPTIMIZE). The zero
// value picks the binary tree when the library supports it.
const (
	OptimizeAuto   Optimize = 0
	OptimizeLinear Optimize = 1
	OptimizeTree   Optimize = 2
)

func (o Optimize) String() string {
	switch o {
	case OptimizeLinear:
		return "linear"
	case OptimizeTree:
		return "tree"
	}
	return "auto"
}

// ParseOptimize reads "auto", "linear" or "tree".
func ParseOptimize(s string) (Optimize, error) {
	switch s {
	case "", "auto":
		return OptimizeAuto, nil
	case "linear":
		return OptimizeLinear, nil
	case "tree":
		return OptimizeTree, nil
	}
	return 0, fmt.Errorf("unknown optimization %q (want auto, linear or tree)", s)
}

// CompileOptions tune Compile.
type CompileOptions struct {
	Optimize Optimize
	// NoENOSYS leaves out the prefix that answers ENOSYS for syscalls newer
	// than the profile (for measurements and tests only).
	NoENOSYS bool
	// oneFilter compiles every architecture in one libseccomp filter, as
	// before the filters were split per architecture (for the tests that
	// compare the two).
	oneFilter bool
}

// Filter is a compiled profile: the BPF program the kernel runs and what
// went into it. A Filter is immutable once returned and safe to share.
type Filter struct {
	// Program is the complete program: the ENOSYS prefix, then libseccomp's.
	Program []Instruction `json:"-"`
	// Flags are the SECCOMP_FILTER_FLAG_* bits from the profile's flags
	// (TSYNC is added when the filter is installed).
	Flags uint `json:"flags"`
	// Arches are the architectures the filter accepts, native first.
	Arches   []string `json:"arches"`
	Optimize Optimize `json:"-"`
	// OptimizeName is Optimize as text, for the summary.
	OptimizeName string `json:"optimize"`
	// Rules is the number of rules added to libseccomp; Syscalls the
	// number of distinct syscalls they name.
	Rules    int `json:"rules"`
	Syscalls int `json:"syscalls"`
	// Instructions is len(Program); StubInstructions the ENOSYS prefix.
	Instructions     int        `json:"instructions"`
	StubInstructions int        `json:"stubInstructions"`
	ENOSYS           []stubArch `json:"enosys,omitempty"`
	Default          Verdict    `json:"default"`
	// Skipped are the syscall names left out, with the reason.
	Skipped []Warning `json:"skipped,omitempty"`
	// Warnings are the profile's own warnings.
	Warnings []Warning `json:"warnings,omitempty"`
	// Notify reports whether the filter uses SCMP_ACT_NOTIFY.
	Notify bool `json:"notify,omitempty"`
	// Hash is the cache key it was compiled under, when it came from a
	// Cache.
	Hash string `json:"hash,omitempty"`

	// lowerBound is minInstructions of its rules (for the test that
	// checks it is one).
	lowerBound int
}

// ErrCompile is wrapped by every error of Compile.
var ErrCompile = errors.New("compile seccomp profile")

func scmpAction(v Verdict) (libseccomp.ScmpAction, error) {
	switch v.Action {
	case ActKill, ActKillThread:
		return libseccomp.ActKillThread, nil
	case ActKillProcess:
		return libseccomp.ActKillProcess, nil
	case ActTrap:
		return libseccomp.ActTrap, nil
	case ActErrno:
		return libseccomp.ActErrno.SetReturnCode(int16(v.Errno)), nil
	case ActTrace:
		return libseccomp.ActTrace.SetReturnCode(int16(v.Errno)), nil
	case ActAllow:
		return libseccomp.ActAllow, nil
	case ActLog:
		return libseccomp.ActLog, nil
	case ActNotify:
		return libseccomp.ActNotify, nil
	}
	return libseccomp.ActInvalid, fmt.Errorf("%w %q", ErrUnknownAction, string(v.Action))
}

var scmpOps = map[Op]libseccomp.ScmpCompareOp{
	OpNotEqual: libseccomp.CompareNotEqual, OpLessThan: libseccomp.CompareLess,
	OpLessEqual: libseccomp.CompareLessOrEqual, OpEqualTo: libseccomp.CompareEqual,
	OpGreaterEqual: libseccomp.CompareGreaterEqual, OpGreaterThan: libseccomp.CompareGreater,
	OpMaskedEqual: libseccomp.CompareMaskedEqual,
}

// auditArches maps libseccomp architectures to the AUDIT_ARCH_ value the
// kernel puts in seccomp_data.arch, for those the ENOSYS prefix covers.
var auditArches = map[libseccomp.ScmpArch]uint32{
	libseccomp.ArchAMD64: unix.AUDIT_ARCH_X86_64,
	libseccomp.ArchX86:   unix.AUDIT_ARCH_I386,
	libseccomp.ArchARM64: unix.AUDIT_ARCH_AARCH64,
	libseccomp.ArchARM:   unix.AUDIT_ARCH_ARM,
}

// nativeArch returns libseccomp's native architecture.
func nativeArch() (libseccomp.ScmpArch, error) {
	a, err := libseccomp.GetNativeArch()
	if err != nil {
		return 0, fmt.Errorf("%w: native architecture: %w", ErrCompile, err)
	}
	return a, nil
}

// LibraryVersion returns libseccomp's version, e.g. "2.5.4".
func LibraryVersion() string {
	maj, min, mic := libseccomp.GetLibraryVersion()
	return fmt.Sprintf("%d.%d.%d", maj, min, mic)
}

// treeSupported reports whether libseccomp has the binary tree optimizer
// (SCMP_FLTATR_CTL_OPTIMIZE, libseccomp 2.5.0).
func treeSupported() bool {
	maj, min, _ := libseccomp.GetLibraryVersion()
	return maj > 2 || (maj == 2 && min >= 5)
}

// Compile turns a parsed profile into a BPF program for the native
// architecture plus the profile's architectures.
//
// Syscall names that libseccomp does not know, or that exist on none of the
// filter's architectures, are skipped and listed in Filter.Skipped (runc does
// the same). Unless opts.NoENOSYS is set and when the default action denies,
// the program starts with a prefix that answers ENOSYS for every syscall
// number above the highest one the profile names on that architecture: such
// a syscall is newer than the profile (or unknown to this kernel, which
// would answer ENOSYS itself), and ENOSYS is what makes libc fall back to an
// older call the profile does judge (clone3 to clone, faccessat2 to
// faccessat), where the default errno would make it fail.
//
// The work is linear in the profile's names: each name is looked up once
// (a name repeated is looked up and skipped through a map), and each
// distinct rule reaches libseccomp once, so a profile that repeats a
// syscall costs what one that names it once does. A profile whose
// distinct rules need more BPF instructions than the kernel accepts is
// refused before libseccomp sees it (see minInstructions).
func Compile(p *Profile, opts CompileOptions) (*Filter, error) {
	return CompileContext(context.Background(), p, opts)
}

// CompileContext is Compile, given up with ctx's error when ctx is done
// before it finishes (it is checked between libseccomp's filters).
func CompileContext(ctx context.Context, p *Profile, opts CompileOptions) (*Filter, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCompile, err)
	}
	def := p.DefaultVerdict()
	defAct, err := scmpAction(def)
	if err != nil {
		return nil, fmt.Errorf("%w: defaultAction: %w", ErrCompile, err)
	}
	native, err := nativeArch()
	if err != nil {
		return nil, err
	}
	f := &Filter{Default: def, Warnings: p.Warnings}
	for _, fl := range p.Flags {
		b, err := fl.Bits()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCompile, err)
		}
		if fl != FlagTSync {
			f.Flags |= b
		}
	}

	arches := []libseccomp.ScmpArch{native}
	for _, name := range p.Architectures {
		a, err := libseccomp.GetArchFromString(archName(name))
		if err != nil {
			return nil, fmt.Errorf("%w: architecture %s: %w", ErrCompile, name, err)
		}
		if a == native || slices.Contains(arches, a) {
			continue
		}
		arches = append(arches, a)
	}
	for _, a := range arches {
		f.Arches = append(f.Arches, a.String())
	}

	f.Optimize = opts.Optimize
	if f.Optimize == OptimizeAuto {
		f.Optimize = OptimizeLinear
		if treeSupported() {
			f.Optimize = OptimizeTree
		}
	}
	f.OptimizeName = f.Optimize.String()

	var rules []pendingRule
	maxNr := map[libseccomp.ScmpArch]int{}
	// named holds what was found of each name the rules list, at its
	// first appearance; a repeat only looks it up here.
	named := map[string]*nameInfo{}
	type ruleKey struct {
		call  libseccomp.ScmpSyscall
		act   libseccomp.ScmpAction
		conds string
	}
	seenRule := map[ruleKey]bool{}
	for _, s := range p.Syscalls {
		v := s.Verdict()
		act, err := scmpAction(v)
		if err != nil {
			return nil, fmt.Errorf("%w: %s.action: %w", ErrCompile, s.Path, err)
		}
		if v.Action == ActNotify {
			f.Notify = true
		}
		var conds string
		if len(s.Args) > 0 {
			conds = argKey(s.Args)
		}
		for j, name := range s.Names {
			path := func() string { return fmt.Sprintf("%s.names[%d]", s.Path, j) }
			info, seen := named[name]
			if !seen {
				info = lookupName(name, arches, maxNr)
				named[name] = info
				if info.skipped >= 0 {
					info.skipped = len(f.Skipped)
					msg := fmt.Sprintf("%q is unknown to libseccomp %s; skipped", name, LibraryVersion())
					if info.call != libseccomp.ScmpSyscall(-1) {
						msg = fmt.Sprintf("%q is not a syscall on %v; skipped", name, f.Arches)
					}
					f.Skipped = append(f.Skipped, Warning{Path: path(), Message: msg})
				}
			}
			if info.skipped >= 0 {
				if seen {
					info.repeats++
				}
				continue
			}
			call := info.call
			if act == defAct {
				// libseccomp refuses a rule that repeats the default
				// action (EACCES); it would change nothing anyway.
				continue
			}
			k := ruleKey{call: call, act: act, conds: conds}
			if seenRule[k] {
				continue // the same rule again: Parse warned
			}
			seenRule[k] = true
			for _, cs := range ruleSplit(s.Args) {
				sc := make([]libseccomp.ScmpCondition, 0, len(cs))
				for k, c := range cs {
					cond, err := libseccomp.MakeCondition(c.Index, scmpOps[c.Op], c.Value, c.ValueTwo)
					if c.Op != OpMaskedEqual {
						cond, err = libseccomp.MakeCondition(c.Index, scmpOps[c.Op], c.Value)
					}
					if err != nil {
						return nil, fmt.Errorf("%w: %s.args[%d]: %w", ErrCompile, s.Path, k, err)
					}
					sc = append(sc, cond)
				}
				rules = append(rules, pendingRule{call: call, act: act, conds: sc, args: cs, path: path(), name: name})
			}
		}
	}
	for _, info := range named {
		switch {
		case info.skipped < 0:
			f.Syscalls++
		case info.repeats > 0:
			f.Skipped[info.skipped].Message += fmt.Sprintf(" (and %d repeats)", info.repeats)
		}
	}
	f.lowerBound = minInstructions(rules)
	if need := f.lowerBound; need > maxInstructions {
		return nil, fmt.Errorf("%w: its distinct rules need at least %d BPF instructions, the kernel accepts at most %d", ErrCompile, need, maxInstructions)
	}
	if f.Flags&flagBits[FlagWaitKillableRecv] != 0 && !f.Notify {
		// The kernel refuses the flag without SECCOMP_FILTER_FLAG_NEW_LISTENER,
		// which only a filter with NOTIFY rules has.
		f.Flags &^= flagBits[FlagWaitKillableRecv]
		f.Warnings = append(f.Warnings[:len(f.Warnings):len(f.Warnings)], Warning{Path: "flags", Message: "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV only applies to SCMP_ACT_NOTIFY rules; ignored"})
	}

	// One libseccomp filter per architecture and per chunk of at most
	// chunkSyscalls syscalls, stitched together after export (see
	// stitchPrograms), unless a rule could be mistaken for one of the
	// markers: libseccomp's rule database and program generator grow with
	// the square of the filter, so many small filters cost a fraction of
	// one large one.
	split := !opts.oneFilter && !usesMarker(p)
	archSets := [][]libseccomp.ScmpArch{arches}
	chunks := [][]pendingRule{rules}
	if split {
		archSets = archSets[:0]
		for _, a := range arches {
			archSets = append(archSets, []libseccomp.ScmpArch{a})
		}
		chunks = chunkRules(rules, chunkSyscalls)
	}
	added := make([]bool, len(rules))
	addErrs := make([]error, len(rules))
	var progs [][]Instruction
	for _, own := range archSets {
		start := 0
		for ci, chunk := range chunks {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrCompile, err)
			}
			act := defAct
			if split && ci < len(chunks)-1 {
				act = chunkMarker
			}
			prog, err := compileChunk(native, own, act, split, f.Optimize, chunk, added[start:], addErrs[start:])
			if err != nil {
				return nil, err
			}
			progs = append(progs, prog)
			start += len(chunk)
		}
	}
	ordered := slices.Concat(chunks...)
	for i, r := range ordered {
		if !added[i] {
			return nil, fmt.Errorf("%w: %s %q: add rule: %w", ErrCompile, r.path, r.name, addErrs[i])
		}
	}
	f.Rules = len(rules)
	prog := progs[0]
	if split {
		prog = stitchPrograms(progs)
	}
	if !opts.NoENOSYS && denies(def) {
		for _, a := range arches {
			audit, ok := auditArches[a]
			if !ok {
				continue
			}
			f.ENOSYS = append(f.ENOSYS, stubArch{Name: a.String(), AuditArch: audit, MaxNr: uint32(maxNr[a]), X32Bit: a == libseccomp.ArchAMD64})
		}
		stub := enosysStub(f.ENOSYS)
		f.StubInstructions = len(stub)
		prog = append(stub, prog...)
	}
	if len(prog) > maxInstructions {
		if split {
			// The stitched program repeats the architecture check per
			// chunk; one filter may still fit.
			opts.oneFilter = true
			return CompileContext(ctx, p, opts)
		}
		return nil, fmt.Errorf("%w: %d instructions, the kernel accepts at most %d", ErrCompile, len(prog), maxInstructions)
	}
	f.Program = prog
	f.Instructions = len(prog)
	return f, nil
}

// denies reports whether a default verdict refuses the syscall, the case in
// which the ENOSYS prefix matters.
func denies(v Verdict) bool {
	switch v.Action {
	case ActErrno:
		return v.Errno != enosysErrno
	case ActKill, ActKillThread, ActKillProcess, ActTrap:
		return true
	}
	return false
}

// archName turns "SCMP_ARCH_X86_64" into the "x86_64" libseccomp-golang reads.
func archName(s string) string {
	const prefix = "SCMP_ARCH_"
	if len(s) > len(prefix) && s[:len(prefix)] == prefix {
		s = s[len(prefix):]
	}
	switch s {
	case "AARCH64":
		return "arm64"
	case "LOONGARCH64":
		return "loong64"
	}
	return s
}

// exportBPF exports libseccomp's program through a memfd:
// seccomp_export_bpf_mem only exists from libseccomp 2.6.
func exportBPF(filter *libseccomp.ScmpFilter) ([]Instruction, error) {
	fd, err := unix.MemfdCreate("nodeshim-seccomp-export", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("%w: memfd_create: %w", ErrCompile, err)
	}
	file := os.NewFile(uintptr(fd), "nodeshim-seccomp-export")
	defer file.Close()
	if err := filter.ExportBPF(file); err != nil {
		return nil, fmt.Errorf("%w: export BPF: %w", ErrCompile, err)
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("%w: rewind exported BPF: %w", ErrCompile, err)
	}
	b, err := io.ReadAll(file)
	if err != nil {
		return nil, fmt.Errorf("%w: read exported BPF: %w", ErrCompile, err)
	}
	return DecodeProgram(b)
}

// The markers of the filters that Compile stitches together: actions no
// profile asks for (usesMarker checks), so that every return of one in an
// exported program means "not answered here": a call of a foreign
// architecture (archMarker, the filters' bad-architecture action) or a
// syscall of another chunk (chunkMarker, the default action of every chunk
// but the last of an architecture).
var (
	archMarker  = libseccomp.ActTrace.SetReturnCode(archMarkerData)
	chunkMarker = libseccomp.ActTrace.SetReturnCode(chunkMarkerData)
)

const (
	archMarkerData  = 0x7ff1
	chunkMarkerData = 0x7ff2
	retArchMarker   = retTrace | archMarkerData
	retChunkMarker  = retTrace | chunkMarkerData
	// retBadArch is libseccomp's default bad-architecture action
	// (SCMP_ACT_KILL), which its filter of several architectures returns
	// for a call of none of them.
	retBadArch = retKillThread
	// chunkSyscalls is how many syscalls one stitched filter judges at
	// most: small enough that libseccomp's quadratic costs stay small, large
	// enough that a call crosses few chunk boundaries (three instructions
	// each: load the arch, compare, jump).
	chunkSyscalls = 64
)

// pendingRule is one rule for libseccomp, with where the profile has it.
type pendingRule struct {
	call  libseccomp.ScmpSyscall
	act   libseccomp.ScmpAction
	conds []libseccomp.ScmpCondition
	// args are the comparisons conds were made of.
	args       []Arg
	path, name string
}

// nameInfo is what Compile found of a syscall name.
type nameInfo struct {
	call libseccomp.ScmpSyscall
	// skipped is the index of the name's Skipped warning, -1 for a
	// syscall of the filter; repeats counts the repeats skipped.
	skipped, repeats int
}

// lookupName finds a syscall name on the filter's architectures and raises
// maxNr to its number on each. skipped is -1 when some architecture has
// it, else 0 (the caller fills in its warning's index), with call -1 when
// libseccomp does not know the name at all.
func lookupName(name string, arches []libseccomp.ScmpArch, maxNr map[libseccomp.ScmpArch]int) *nameInfo {
	call, err := libseccomp.GetSyscallFromName(name)
	if err != nil {
		return &nameInfo{call: -1}
	}
	info := &nameInfo{call: call}
	onSome := false
	for _, a := range arches {
		n, err := libseccomp.GetSyscallFromNameByArch(name, a)
		if err != nil || n < 0 {
			continue
		}
		onSome = true
		if a != libseccomp.ArchX32 && int(n) > maxNr[a] {
			maxNr[a] = int(n)
		}
	}
	if onSome {
		info.skipped = -1
	}
	return info
}

// minInstructions is a lower bound of the instructions any program judging
// rules takes on one architecture: at least one for each distinct syscall
// (the compare of its number) and one for each distinct comparison of its
// arguments (libseccomp may share a comparison between rules, never one
// instruction between two comparisons). Compile refuses rules above the
// kernel's limit with it, before libseccomp's costs, which grow faster
// than the rules, are paid.
func minInstructions(rules []pendingRule) int {
	type cmp struct {
		call libseccomp.ScmpSyscall
		arg  Arg
	}
	calls := map[libseccomp.ScmpSyscall]bool{}
	cmps := map[cmp]bool{}
	for _, r := range rules {
		calls[r.call] = true
		for _, a := range r.args {
			cmps[cmp{r.call, a}] = true
		}
	}
	return len(calls) + len(cmps)
}

// multiplexed are the syscalls that x86 (and s390, ppc, mips) also reach
// through socketcall(2) or ipc(2). libseccomp adds a rule on one of them
// to the multiplexer as well, and what it adds depends on the rules the
// filter already has for the multiplexer and its other calls, so they all
// go to one chunk.
var multiplexed = map[string]bool{
	"socketcall": true, "socket": true, "bind": true, "connect": true, "listen": true, "accept": true,
	"getsockname": true, "getpeername": true, "socketpair": true, "send": true, "recv": true,
	"sendto": true, "recvfrom": true, "shutdown": true, "setsockopt": true, "getsockopt": true,
	"sendmsg": true, "recvmsg": true, "accept4": true, "recvmmsg": true, "sendmmsg": true,
	"ipc": true, "semop": true, "semget": true, "semctl": true, "semtimedop": true, "msgsnd": true,
	"msgrcv": true, "msgget": true, "msgctl": true, "shmat": true, "shmdt": true, "shmget": true, "shmctl": true,
}

// chunkRules splits rules into chunks of at most n syscalls, every rule of
// one syscall in the same chunk and in the profile's order; the
// multiplexed syscalls count as one.
func chunkRules(rules []pendingRule, n int) [][]pendingRule {
	type group struct {
		call libseccomp.ScmpSyscall
		mux  bool
	}
	bySyscall := map[group][]pendingRule{}
	var order []group
	for _, r := range rules {
		g := group{call: r.call}
		if multiplexed[r.name] {
			g = group{mux: true}
		}
		if _, ok := bySyscall[g]; !ok {
			order = append(order, g)
		}
		bySyscall[g] = append(bySyscall[g], r)
	}
	chunks := [][]pendingRule{nil}
	for i, g := range order {
		if i > 0 && i%n == 0 {
			chunks = append(chunks, nil)
		}
		chunks[len(chunks)-1] = append(chunks[len(chunks)-1], bySyscall[g]...)
	}
	return chunks
}

// compileChunk builds one libseccomp filter of the architectures own with
// default action def and the given rules and exports its program. The
// markers are set when split. added[i] is set when rules[i] was taken;
// errs[i] keeps the first refusal: libseccomp adds a rule of a filter of
// several architectures to each that has the syscall, and fails only when
// none takes it, so Compile fails only when no architecture took a rule.
func compileChunk(native libseccomp.ScmpArch, own []libseccomp.ScmpArch, def libseccomp.ScmpAction, split bool, opt Optimize, rules []pendingRule, added []bool, errs []error) ([]Instruction, error) {
	filter, err := libseccomp.NewFilter(def)
	if err != nil {
		return nil, fmt.Errorf("%w: new filter: %w", ErrCompile, err)
	}
	defer filter.Release()
	if split {
		if err := filter.SetBadArchAction(archMarker); err != nil {
			return nil, fmt.Errorf("%w: set the bad-architecture action: %w", ErrCompile, err)
		}
	}
	for _, a := range own {
		if a == native {
			continue
		}
		if err := filter.AddArch(a); err != nil {
			return nil, fmt.Errorf("%w: add architecture %s: %w", ErrCompile, a, err)
		}
	}
	if !slices.Contains(own, native) {
		if err := filter.RemoveArch(native); err != nil {
			return nil, fmt.Errorf("%w: remove architecture %s: %w", ErrCompile, native, err)
		}
	}
	if opt == OptimizeTree {
		if err := filter.SetOptimize(int(OptimizeTree)); err != nil {
			return nil, fmt.Errorf("%w: binary tree optimizer (libseccomp %s): %w", ErrCompile, LibraryVersion(), err)
		}
	}
	for i, r := range rules {
		if len(r.conds) == 0 {
			err = filter.AddRule(r.call, r.act)
		} else {
			err = filter.AddRuleConditional(r.call, r.act, r.conds)
		}
		switch {
		case err == nil:
			added[i] = true
		case errs[i] == nil:
			errs[i] = err
		}
	}
	return exportBPF(filter)
}

// usesMarker reports whether a rule or the default of p returns one of
// the markers, which would make stitching ambiguous.
func usesMarker(p *Profile) bool {
	marker := func(v Verdict) bool {
		return v.Action == ActTrace && (v.Errno == archMarkerData || v.Errno == chunkMarkerData)
	}
	if marker(p.DefaultVerdict()) {
		return true
	}
	for _, s := range p.Syscalls {
		if marker(s.Verdict()) {
			return true
		}
	}
	return false
}

// stitchPrograms joins the programs of the filters of one architecture and
// one chunk each into one program that answers as one filter of all of
// them. Each program starts with its own architecture check; a marker
// return (a call of another architecture, or, for x86_64 and x32 which
// share one, the other half of the syscall numbers; a syscall of another
// chunk) becomes a jump to the next program, and in the last program the
// bad-architecture action of libseccomp's own multi-architecture filter.
// Jumps inside a program are relative and the replaced instruction keeps
// its place, so nothing else moves.
func stitchPrograms(progs [][]Instruction) []Instruction {
	var out []Instruction
	for i, prog := range progs {
		last := i == len(progs)-1
		for pc, ins := range prog {
			if ins.Code == bpfRET|bpfK && (ins.K == retArchMarker || ins.K == retChunkMarker) {
				if last {
					// Only a foreign architecture reaches a marker in
					// the last program: its chunk is the last one.
					ins = Instruction{Code: bpfRET | bpfK, K: retBadArch}
				} else {
					ins = Instruction{Code: bpfJMP | bpfJA, K: uint32(len(prog) - pc - 1)}
				}
			}
			out = append(out, ins)
		}
	}
	return out
}
