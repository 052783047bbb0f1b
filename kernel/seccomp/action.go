package seccomp

import (
	"fmt"
	"strconv"
)

// Action is a seccomp action as the OCI runtime spec spells it, e.g.
// "SCMP_ACT_ERRNO".
type Action string

// The actions of the OCI runtime spec. SCMP_ACT_KILL is the historical name
// of SCMP_ACT_KILL_THREAD.
const (
	ActKill        Action = "SCMP_ACT_KILL"
	ActKillThread  Action = "SCMP_ACT_KILL_THREAD"
	ActKillProcess Action = "SCMP_ACT_KILL_PROCESS"
	ActTrap        Action = "SCMP_ACT_TRAP"
	ActErrno       Action = "SCMP_ACT_ERRNO"
	ActTrace       Action = "SCMP_ACT_TRACE"
	ActAllow       Action = "SCMP_ACT_ALLOW"
	ActLog         Action = "SCMP_ACT_LOG"
	ActNotify      Action = "SCMP_ACT_NOTIFY"
)

var knownActions = map[Action]bool{
	ActKill: true, ActKillThread: true, ActKillProcess: true, ActTrap: true, ActErrno: true,
	ActTrace: true, ActAllow: true, ActLog: true, ActNotify: true,
}

// Valid reports whether a is one of the actions above.
func (a Action) Valid() bool { return knownActions[a] }

// Kills reports whether a ends the thread or process with SIGSYS.
func (a Action) Kills() bool { return a == ActKill || a == ActKillThread || a == ActKillProcess }

// TakesErrno reports whether a carries an errnoRet (ERRNO, and TRACE, whose
// value is the tracer's message data).
func (a Action) TakesErrno() bool { return a == ActErrno || a == ActTrace }

// Permits reports whether the syscall runs under a (ALLOW or LOG).
func (a Action) Permits() bool { return a == ActAllow || a == ActLog }

// Op is an argument comparison as the OCI runtime spec spells it, e.g.
// "SCMP_CMP_MASKED_EQ".
type Op string

// The comparison operators of the OCI runtime spec.
const (
	OpNotEqual     Op = "SCMP_CMP_NE"
	OpLessThan     Op = "SCMP_CMP_LT"
	OpLessEqual    Op = "SCMP_CMP_LE"
	OpEqualTo      Op = "SCMP_CMP_EQ"
	OpGreaterEqual Op = "SCMP_CMP_GE"
	OpGreaterThan  Op = "SCMP_CMP_GT"
	OpMaskedEqual  Op = "SCMP_CMP_MASKED_EQ"
)

var knownOps = map[Op]bool{
	OpNotEqual: true, OpLessThan: true, OpLessEqual: true, OpEqualTo: true,
	OpGreaterEqual: true, OpGreaterThan: true, OpMaskedEqual: true,
}

// Valid reports whether o is one of the operators above.
func (o Op) Valid() bool { return knownOps[o] }

// Match evaluates the comparison on a 64-bit argument value the way
// libseccomp's generated BPF does: unsigned, and for MASKED_EQ
// (arg & value) == valueTwo.
func (o Op) Match(arg, value, valueTwo uint64) bool {
	switch o {
	case OpNotEqual:
		return arg != value
	case OpLessThan:
		return arg < value
	case OpLessEqual:
		return arg <= value
	case OpEqualTo:
		return arg == value
	case OpGreaterEqual:
		return arg >= value
	case OpGreaterThan:
		return arg > value
	case OpMaskedEqual:
		return arg&value == valueTwo
	}
	return false
}

// Verdict is the effective outcome of a syscall under a profile: an action
// and, for ERRNO and TRACE, its value.
type Verdict struct {
	Action Action `json:"action"`
	// Errno is the errno returned for ERRNO (and the message data of TRACE).
	Errno uint `json:"errno,omitempty"`
}

// String renders v as ERRNO(13), ALLOW, KILL_PROCESS...
func (v Verdict) String() string {
	name := string(v.Action)
	if len(name) > len("SCMP_ACT_") {
		name = name[len("SCMP_ACT_"):]
	}
	if v.Action.TakesErrno() {
		return name + "(" + strconv.FormatUint(uint64(v.Errno), 10) + ")"
	}
	return name
}

// Flag is a seccomp filter flag as the OCI runtime spec spells it.
type Flag string

// The filter flags of the OCI runtime spec, with the kernel flag values of
// include/uapi/linux/seccomp.h.
const (
	FlagTSync            Flag = "SECCOMP_FILTER_FLAG_TSYNC"
	FlagLog              Flag = "SECCOMP_FILTER_FLAG_LOG"
	FlagSpecAllow        Flag = "SECCOMP_FILTER_FLAG_SPEC_ALLOW"
	FlagWaitKillableRecv Flag = "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV"
)

// flagBits maps each accepted flag to its kernel value.
var flagBits = map[Flag]uint{
	FlagTSync:            1 << 0,
	FlagLog:              1 << 1,
	FlagSpecAllow:        1 << 2,
	FlagWaitKillableRecv: 1 << 5,
}

// Bits returns the kernel value of f, or an error for an unknown flag.
func (f Flag) Bits() (uint, error) {
	b, ok := flagBits[f]
	if !ok {
		return 0, fmt.Errorf("%w %q", ErrUnknownFlag, string(f))
	}
	return b, nil
}
