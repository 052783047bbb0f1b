package seccomp

import "slices"

// Complain returns p in complain mode: what p would deny is allowed and
// logged. The default action and every rule whose action does not let the
// syscall run (ERRNO, KILL*, TRAP, TRACE, NOTIFY) become SCMP_ACT_LOG,
// without an errno; ALLOW rules stay, so that what p allows is not
// logged; LOG rules stay. A rule that has become the default action is
// left out, as runc leaves it out: libseccomp refuses a rule whose action
// is the filter's default. The ENOSYS prefix that Compile adds for a
// denying default is not added either: with LOG as the default, a syscall
// newer than the profile runs and is logged too. The kernel writes a
// SCMP_ACT_LOG hit to the audit log (type=1326, AUDIT_SECCOMP) only while
// /proc/sys/kernel/seccomp/actions_logged lists "log" (EnsureActionLogged).
// p is not modified.
func Complain(p *Profile) *Profile {
	c := &Profile{
		DefaultAction:   p.DefaultAction,
		DefaultErrnoRet: p.DefaultErrnoRet,
		Architectures:   slices.Clone(p.Architectures),
		Flags:           slices.Clone(p.Flags),
		Shape:           p.Shape,
		Warnings:        slices.Clone(p.Warnings),
	}
	if !c.DefaultAction.Permits() {
		c.DefaultAction, c.DefaultErrnoRet = ActLog, nil
	}
	for _, s := range p.Syscalls {
		if !s.Action.Permits() {
			s.Action, s.ErrnoRet = ActLog, nil
		}
		if s.Action == c.DefaultAction {
			continue
		}
		s.Names = slices.Clone(s.Names)
		s.Args = slices.Clone(s.Args)
		c.Syscalls = append(c.Syscalls, s)
	}
	return c
}
