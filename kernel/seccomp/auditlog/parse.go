package auditlog

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// TypeSeccomp is the audit record type of a seccomp action
// (AUDIT_SECCOMP, include/uapi/linux/audit.h).
const TypeSeccomp = 1326

// The action bits of a record's code= field (SECCOMP_RET_ACTION_FULL of
// the filter's return value, include/uapi/linux/seccomp.h).
const (
	RetKillProcess uint32 = 0x80000000
	RetKillThread  uint32 = 0x00000000
	RetTrap        uint32 = 0x00030000
	RetErrno       uint32 = 0x00050000
	RetUserNotif   uint32 = 0x7fc00000
	RetTrace       uint32 = 0x7ff00000
	RetLog         uint32 = 0x7ffc0000
	RetAllow       uint32 = 0x7fff0000
	retActionFull  uint32 = 0xffff0000
)

// ErrNotSeccomp is returned by Parse for a line that is not a seccomp
// audit record; ErrMalformed is wrapped for one that is but does not
// decode.
var (
	ErrNotSeccomp = errors.New("not a seccomp audit record")
	ErrMalformed  = errdefs.New(errdefs.ErrInvalidArgument, "malformed seccomp audit record")
)

// Record is one seccomp audit record.
type Record struct {
	// Time and Serial are the record's audit(SECONDS.MILLIS:SERIAL) stamp.
	Time   time.Time
	Serial uint64
	// PID is the thread group's id in the initial pid namespace; UID the
	// task's uid there.
	PID  int
	UID  uint32
	Comm string
	Exe  string
	// Arch is the AUDIT_ARCH_ value (0xc000003e for x86_64), Syscall the
	// syscall's number on it; Compat is set for a 32-bit call on a 64-bit
	// kernel.
	Arch    uint32
	Syscall int32
	Compat  bool
	// Code is the filter's return value; Action its action bits.
	Code uint32
}

// Action is the action bits of the record's code (RetLog for
// SCMP_ACT_LOG).
func (r Record) Action() uint32 { return r.Code & retActionFull }

// Parse reads one line of the kernel log or the audit log: a kmsg record
// ("6,1234,9856620521,-;audit: type=1326 ..."), a line of dmesg, or an
// audit.log line ("type=SECCOMP msg=audit(...): ..."). A line that is not
// a seccomp record is ErrNotSeccomp.
func Parse(line string) (Record, error) {
	var r Record
	if i := strings.IndexByte(line, ';'); i >= 0 && i < strings.Index(line+"type=", "type=") {
		line = line[i+1:] // the kmsg prefix
	}
	i := strings.Index(line, "type=")
	if i < 0 {
		return r, ErrNotSeccomp
	}
	rest := line[i+len("type="):]
	typ, rest, _ := strings.Cut(rest, " ")
	if typ != strconv.Itoa(TypeSeccomp) && typ != "SECCOMP" {
		return r, ErrNotSeccomp
	}
	malformed := func(format string, args ...any) (Record, error) {
		return Record{}, fmt.Errorf("%w: %s: %q", ErrMalformed, fmt.Sprintf(format, args...), line)
	}
	// audit(SECONDS.MILLIS:SERIAL):
	j := strings.Index(rest, "audit(")
	if j < 0 {
		return malformed("no audit( stamp")
	}
	stamp, fields, ok := strings.Cut(rest[j+len("audit("):], "):")
	if !ok {
		return malformed("unterminated audit( stamp")
	}
	secs, serial, ok := strings.Cut(stamp, ":")
	if !ok {
		return malformed("stamp %q has no serial", stamp)
	}
	whole, frac, _ := strings.Cut(secs, ".")
	s, err1 := strconv.ParseInt(whole, 10, 64)
	ms, err2 := strconv.ParseInt(frac+strings.Repeat("0", max(0, 3-len(frac))), 10, 64)
	n, err3 := strconv.ParseUint(serial, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || len(frac) > 3 || s < 0 {
		return malformed("stamp %q", stamp)
	}
	r.Time, r.Serial = time.Unix(s, ms*int64(time.Millisecond)).UTC(), n

	seen := map[string]bool{}
	for f := range fieldsOf(fields) {
		k, v := f[0], f[1]
		var err error
		switch k {
		case "pid":
			var p uint64
			p, err = strconv.ParseUint(v, 10, 31)
			r.PID = int(p)
		case "uid":
			var u uint64
			u, err = strconv.ParseUint(v, 10, 32)
			r.UID = uint32(u)
		case "comm":
			r.Comm, err = unquote(v)
		case "exe":
			r.Exe, err = unquote(v)
		case "arch":
			var a uint64
			a, err = strconv.ParseUint(v, 16, 32)
			r.Arch = uint32(a)
		case "syscall":
			var n int64
			n, err = strconv.ParseInt(v, 10, 32)
			r.Syscall = int32(n)
		case "compat":
			r.Compat = v == "1"
		case "code":
			var c uint64
			c, err = strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 32)
			r.Code = uint32(c)
		default:
			continue
		}
		if err != nil {
			return malformed("field %s=%s", k, v)
		}
		seen[k] = true
	}
	for _, k := range []string{"pid", "arch", "syscall", "code"} {
		if !seen[k] {
			return malformed("no %s=", k)
		}
	}
	return r, nil
}

// fieldsOf yields the key=value fields of a record; a quoted value may
// hold spaces.
func fieldsOf(s string) func(func([2]string) bool) {
	return func(yield func([2]string) bool) {
		for s != "" {
			s = strings.TrimLeft(s, " ")
			k, rest, ok := strings.Cut(s, "=")
			if !ok || strings.ContainsRune(k, ' ') {
				return
			}
			var v string
			if strings.HasPrefix(rest, `"`) {
				end := strings.IndexByte(rest[1:], '"')
				if end < 0 {
					return
				}
				v, s = rest[:end+2], rest[end+2:]
			} else {
				v, s, _ = strings.Cut(rest, " ")
			}
			if !yield([2]string{k, v}) {
				return
			}
		}
	}
}

// unquote reads a value the audit subsystem wrote quoted ("mkdir") or,
// when it has unsafe bytes, as hex (6D6B646972).
func unquote(v string) (string, error) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		return v[1 : len(v)-1], nil
	}
	if v == "(null)" {
		return "", nil
	}
	if len(v)%2 != 0 {
		return "", fmt.Errorf("odd hex %q", v)
	}
	b := make([]byte, len(v)/2)
	for i := range b {
		x, err := strconv.ParseUint(v[2*i:2*i+2], 16, 8)
		if err != nil {
			return "", err
		}
		b[i] = byte(x)
	}
	return string(b), nil
}
