package seccomp

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"syscall"

	libseccomp "github.com/seccomp/libseccomp-golang"
)

// VerifyOptions tune Verify.
type VerifyOptions struct {
	// Sample is how many syscalls the profile does not name are probed
	// too, spread evenly over the native syscall table; 0 means 32, a
	// negative value none.
	Sample int
}

// Status is the result of one probe.
type Status string

// Probe statuses. Inconclusive means the kernel's answer agrees with the
// profile but the syscall gives the same answer without the filter, so the
// probe cannot tell them apart.
const (
	StatusOK           Status = "ok"
	StatusMismatch     Status = "mismatch"
	StatusInconclusive Status = "inconclusive"
	StatusNotProbed    Status = "not-probed"
)

// Result is one probed syscall invocation.
type Result struct {
	Syscall string `json:"syscall"`
	// Arch is the ABI the syscall was made through: the native one, or
	// "x86" through int $0x80 on x86_64.
	Arch string   `json:"arch"`
	Nr   int      `json:"nr"`
	Args []string `json:"args,omitempty"`
	// Why says why it was probed: "named" by the profile, "sample" of the
	// default action, "enosys" for the prefix.
	Why      string `json:"why"`
	Expected string `json:"expected"`
	Rule     string `json:"rule,omitempty"`
	Observed string `json:"observed,omitempty"`
	Baseline string `json:"baseline,omitempty"`
	Status   Status `json:"status"`
	Detail   string `json:"detail,omitempty"`
}

// Report is the outcome of Verify.
type Report struct {
	Results      []Result `json:"results"`
	Probed       int      `json:"probed"`
	OK           int      `json:"ok"`
	Mismatches   int      `json:"mismatches"`
	Inconclusive int      `json:"inconclusive"`
	NotProbed    int      `json:"notProbed"`
	// Children is the number of probe processes run under the filter:
	// one for each probe.
	Children int `json:"children"`
}

// notProbed lists syscalls that cannot be called with harmless invalid
// arguments, with the reason.
var notProbed = map[string]string{
	"exit":         "ends the probe",
	"exit_group":   "ends the probe",
	"rt_sigreturn": "restores a forged signal frame",
	"sigreturn":    "restores a forged signal frame",
	"pause":        "blocks until a signal",
	"vfork":        "the child would share the probe's stack",
}

// notProbedI386 adds the ia32 syscalls that block or would change the
// probe's signal mask for good.
var notProbedI386 = map[string]string{
	"sigsuspend": "blocks until a signal",
	"ssetmask":   "would block SIGSYS",
}

// forklike syscalls create a child that returns 0 and must leave at once.
var forklike = map[string]bool{"fork": true, "clone": true, "clone3": true}

// cloneUnsafe are clone(2) flags a probe never passes: a child sharing the
// probe's memory, stack or thread group, or writing through its pointers.
const cloneUnsafe = syscall.CLONE_VM | syscall.CLONE_VFORK | syscall.CLONE_THREAD | syscall.CLONE_SIGHAND |
	syscall.CLONE_SETTLS | syscall.CLONE_PARENT_SETTID | syscall.CLONE_CHILD_SETTID |
	syscall.CLONE_CHILD_CLEARTID | 0x1000 /* CLONE_PIDFD */

// baseArgs are the harmless invalid arguments a syscall is probed with:
// all ones (fd -1, pointer -1, flags with every bit, which the kernel
// rejects), with exceptions where that would do something real.
func baseArgs(name string) [6]uint64 {
	all := ^uint64(0)
	a := [6]uint64{all, all, all, all, all, all}
	switch name {
	case "clone":
		// flags -1 is EINVAL; a stack, tid pointers and tls of 0 mean a
		// plain fork when a probe passes a valid flags value.
		a = [6]uint64{all, 0, 0, 0, 0, 0}
	case "msgget":
		a[1] = 0 // no IPC_CREAT: never creates a queue
	case "semget", "shmget":
		a[2] = 0
	}
	return a
}

// argVectors returns the argument vectors to probe name with: the base
// vector, and for each comparison in the profile a value on each side of it.
func argVectors(p *Profile, naming []int, name string) [][6]uint64 {
	base := baseArgs(name)
	out := [][6]uint64{base}
	seen := map[[6]uint64]bool{base: true}
	add := func(idx uint, v uint64) {
		if name == "clone" && idx == 0 {
			v &^= cloneUnsafe
		}
		a := base
		a[idx] = v
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for _, i := range naming {
		for _, c := range p.Syscalls[i].Args {
			if c.Index > 5 {
				continue
			}
			switch c.Op {
			case OpMaskedEqual:
				add(c.Index, c.ValueTwo)
				low := c.Value & -c.Value
				add(c.Index, c.ValueTwo^low)
				add(c.Index, c.ValueTwo|c.Value)
			default:
				add(c.Index, c.Value)
				add(c.Index, c.Value+1)
				add(c.Index, c.Value-1)
			}
		}
	}
	return out
}

type probeCase struct {
	name   string
	arch   string
	why    string
	expect Outcome
	rec    int
}

// Verify proves what the compiled filter does on this kernel. Child
// processes call every syscall the profile names (and a sample of those it
// does not) with harmless invalid arguments, and conditional syscalls with
// values on both sides of each comparison; on x86_64 a filter with the x86
// architecture is probed through the ia32 entry (int $0x80) too, where the
// kernel allows it. Each call runs first without a filter (the baseline)
// and then under f, every time in a process of its own forked from the same
// unfiltered parent: no probe sees what an earlier one changed (a call that
// the filter denies but the baseline runs, such as personality(2) or
// setuid(2), would otherwise change the baseline's answers after it, and
// results would depend on probe order). The kernel's answer is compared
// with what the profile means (Profile.Evaluate): allowed syscalls must
// answer as they do unfiltered; denied ones exactly errnoRet; kill actions
// must end the child with SIGSYS; TRAP must raise SIGSYS with SYS_SECCOMP;
// TRACE and NOTIFY, with no tracer or listener attached, answer ENOSYS;
// numbers above the ENOSYS prefix's limit answer ENOSYS. A probe whose baseline gives the
// same answer, or kills the child, is inconclusive.
func Verify(ctx context.Context, p *Profile, f *Filter, opts VerifyOptions) (*Report, error) {
	native, err := nativeArch()
	if err != nil {
		return nil, err
	}
	stubMax := map[string]int64{}
	for _, a := range f.ENOSYS {
		stubMax[a.Name] = int64(a.MaxNr)
	}
	// The ia32 section of the filter is probed too when the filter has it
	// and this is x86_64 (int $0x80 reaches it from a 64-bit process).
	i386 := false
	for _, a := range f.Arches {
		if a == libseccomp.ArchX86.String() && native == libseccomp.ArchAMD64 {
			i386 = true
		}
	}
	rep := &Report{}
	if i386 {
		if ok, reason := ia32Available(ctx); !ok {
			i386 = false
			rep.Results = append(rep.Results, Result{Syscall: "*", Arch: libseccomp.ArchX86.String(), Nr: -1, Why: "named", Status: StatusNotProbed, Detail: reason})
		}
	}
	idx := ruleIndex(p)
	var recs []probeRecord
	var cases []probeCase
	addCase := func(arch libseccomp.ScmpArch, name string, nr int64, args [6]uint64, why string) {
		isI386 := arch == libseccomp.ArchX86
		if isI386 {
			for i := range args {
				args[i] &= 0xffffffff
			}
		}
		var exp Outcome
		if max, ok := stubMax[arch.String()]; ok && nr > max {
			exp = Outcome{Verdict: Verdict{Action: ActErrno, Errno: enosysErrno}, Rule: "enosys prefix"}
		} else {
			exp = p.evaluate(idx[name], args)
		}
		cases = append(cases, probeCase{name: name, arch: arch.String(), why: why, expect: exp, rec: len(recs)})
		recs = append(recs, probeRecord{Nr: nr, Args: args, Forklike: forklike[name], I386: isI386})
	}
	skip := func(arch libseccomp.ScmpArch, name string, nr int64, why, reason string) {
		rep.Results = append(rep.Results, Result{Syscall: name, Arch: arch.String(), Nr: int(nr), Why: why, Status: StatusNotProbed, Detail: reason})
	}

	named := map[string]bool{}
	for _, name := range p.Names() {
		named[name] = true
		arches := []libseccomp.ScmpArch{native}
		if i386 {
			arches = append(arches, libseccomp.ArchX86)
		}
		for _, arch := range arches {
			nr, err := libseccomp.GetSyscallFromNameByArch(name, arch)
			if err != nil || nr < 0 {
				if arch == native {
					skip(arch, name, -1, "named", "not a syscall on "+arch.String())
				}
				continue
			}
			reason, ok := notProbed[name]
			if r32, ok32 := notProbedI386[name]; ok32 && arch == libseccomp.ArchX86 {
				reason, ok = r32, true
			}
			if ok {
				skip(arch, name, int64(nr), "named", reason)
				continue
			}
			for _, args := range argVectors(p, idx[name], name) {
				addCase(arch, name, int64(nr), args, "named")
			}
		}
	}

	sample := opts.Sample
	if sample == 0 {
		sample = 32
	}
	if sample > 0 {
		var unnamed []string
		var nrs []int64
		for nr := 0; nr < 1024; nr++ {
			name, err := libseccomp.ScmpSyscall(nr).GetNameByArch(native)
			if err != nil || named[name] || notProbed[name] != "" {
				continue
			}
			unnamed = append(unnamed, name)
			nrs = append(nrs, int64(nr))
		}
		step := 1
		if len(unnamed) > sample {
			step = len(unnamed) / sample
		}
		for i := 0; i < len(unnamed) && i/step < sample; i += step {
			addCase(native, unnamed[i], nrs[i], baseArgs(unnamed[i]), "sample")
		}
	}
	all := ^uint64(0)
	for _, arch := range []libseccomp.ScmpArch{native, libseccomp.ArchX86} {
		max, ok := stubMax[arch.String()]
		if !ok || (arch != native && !i386) {
			continue
		}
		for _, nr := range []int64{max + 1, 1023} {
			if nr > max && nr < x32SyscallBit {
				addCase(arch, fmt.Sprintf("#%d", nr), nr, [6]uint64{all, all, all, all, all, all}, "enosys")
			}
		}
	}

	baseline := make([]probeRecord, len(recs))
	copy(baseline, recs)
	if _, err := runProbes(ctx, nil, baseline); err != nil {
		return nil, fmt.Errorf("verify: unfiltered baseline: %w", err)
	}
	children, err := runProbes(ctx, f, recs)
	if err != nil {
		return nil, fmt.Errorf("verify: under the filter: %w", err)
	}
	rep.Children = children

	for _, c := range cases {
		r := recs[c.rec]
		b := baseline[c.rec]
		res := Result{
			Syscall:  c.name,
			Arch:     c.arch,
			Nr:       int(r.Nr),
			Why:      c.why,
			Expected: outcomeString(c.expect),
			Rule:     c.expect.Rule,
			Observed: observed(r),
			Baseline: observed(b),
		}
		for _, a := range r.Args {
			res.Args = append(res.Args, fmt.Sprintf("%#x", a))
		}
		res.Status, res.Detail = judge(c.expect, r, b)
		rep.Results = append(rep.Results, res)
	}
	sort.SliceStable(rep.Results, func(i, j int) bool {
		a, b := rep.Results[i], rep.Results[j]
		if a.Arch != b.Arch {
			return a.Arch < b.Arch
		}
		return a.Nr < b.Nr
	})
	for _, r := range rep.Results {
		switch r.Status {
		case StatusOK:
			rep.OK++
		case StatusMismatch:
			rep.Mismatches++
		case StatusInconclusive:
			rep.Inconclusive++
		case StatusNotProbed:
			rep.NotProbed++
		}
		if r.Status != StatusNotProbed {
			rep.Probed++
		}
	}
	return rep, nil
}

// ia32Available finds out whether a 64-bit process can make ia32 syscalls
// through int $0x80 here (IA32_EMULATION, and a hypervisor that passes the
// vector through), by calling getpid that way in a probe child.
func ia32Available(ctx context.Context) (bool, string) {
	recs := []probeRecord{{Nr: 20 /* getpid on i386 */, I386: true}}
	if _, err := runProbes(ctx, nil, recs); err != nil {
		return false, fmt.Sprintf("ia32 probe failed: %v", err)
	}
	if recs[0].State != 2 || recs[0].Errno != 0 {
		return false, "the ia32 syscall entry is not usable here (getpid through int $0x80: " + observed(recs[0]) + "); the x86 part of the filter is not verified"
	}
	return true, ""
}

func outcomeString(o Outcome) string {
	if len(o.Candidates) == 0 {
		return o.Verdict.String()
	}
	parts := make([]string, len(o.Candidates))
	for i, c := range o.Candidates {
		parts[i] = c.String()
	}
	return strings.Join(parts, " or ")
}

// observation classes of a probe record.
func observed(r probeRecord) string {
	switch {
	case r.Signal != 0 && r.Trapped:
		return fmt.Sprintf("trapped (SIGSYS data %d), then died by %v", r.TrapData, r.Signal)
	case r.Signal != 0:
		return "killed by " + signalName(r.Signal)
	case r.Trapped:
		return fmt.Sprintf("trapped (SIGSYS data %d)", r.TrapData)
	case r.State == probeExited:
		return fmt.Sprintf("exited with status %d", r.Ret)
	case r.State != 2:
		return "not reached"
	case r.Errno != 0:
		return "errno " + errnoName(syscall.Errno(r.Errno))
	}
	return "success"
}

func signalName(s syscall.Signal) string {
	if s == syscall.SIGSYS {
		return "SIGSYS"
	}
	return s.String()
}

func errnoName(e syscall.Errno) string {
	if e == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", int(e), e.Error())
}

// judge compares the filtered record r with the baseline b and the
// profile's expected outcome.
func judge(exp Outcome, r, b probeRecord) (Status, string) {
	verdicts := append([]Verdict{exp.Verdict}, exp.Candidates...)
	if b.Signal != 0 {
		// The syscall kills the probe even without a filter: only a kill
		// action, told apart by SIGSYS, can still be proven.
		for _, v := range verdicts {
			if ok, _, _ := matches(v, r, b); ok && v.Action.Kills() && b.Signal != syscall.SIGSYS {
				return StatusOK, ""
			}
		}
		return StatusInconclusive, "the unfiltered syscall kills the probe (" + observed(b) + ")"
	}
	var details []string
	inconclusive := false
	for _, v := range verdicts {
		ok, same, detail := matches(v, r, b)
		if ok && !same {
			return StatusOK, ""
		}
		if ok {
			inconclusive = true
		}
		details = append(details, detail)
	}
	if inconclusive {
		return StatusInconclusive, "the unfiltered syscall answers the same"
	}
	return StatusMismatch, strings.Join(details, "; ")
}

// matches reports whether r is what verdict v produces, and whether the
// unfiltered baseline b looks the same (so the probe cannot tell).
func matches(v Verdict, r, b probeRecord) (ok, sameAsBaseline bool, detail string) {
	obs, base := observed(r), observed(b)
	errnoIs := func(n int32) bool { return r.Signal == 0 && !r.Trapped && r.State == 2 && r.Errno == n }
	switch v.Action {
	case ActAllow, ActLog:
		if obs == base {
			return true, false, ""
		}
		return false, false, fmt.Sprintf("want the unfiltered answer (%s) for %s, got %s", base, v, obs)
	case ActErrno:
		if errnoIs(int32(v.Errno)) {
			return true, obs == base, ""
		}
		return false, false, fmt.Sprintf("want errno %d for %s, got %s", v.Errno, v, obs)
	case ActTrace, ActNotify:
		// No tracer (TRACE) or listener (NOTIFY) is attached to the probe,
		// so the kernel answers ENOSYS (kernel/seccomp.c).
		if errnoIs(enosysErrno) {
			return true, obs == base, ""
		}
		return false, false, fmt.Sprintf("want ENOSYS for %s without a tracer or listener, got %s", v, obs)
	case ActTrap:
		if r.Trapped {
			return true, false, ""
		}
		return false, false, fmt.Sprintf("want SIGSYS (SYS_SECCOMP) for %s, got %s", v, obs)
	case ActKill, ActKillThread, ActKillProcess:
		if r.Signal == syscall.SIGSYS && !r.Trapped {
			return true, false, ""
		}
		return false, false, fmt.Sprintf("want death by SIGSYS for %s, got %s", v, obs)
	}
	return false, false, fmt.Sprintf("unknown action %s", v.Action)
}
