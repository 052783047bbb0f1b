package bpf

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/nodeshim/nodeshim/kernel/seccomp"
	"golang.org/x/sys/unix"
)

// BuildProfile returns the OCI seccomp profile that allows the syscalls
// named in names on arch (an SCMP_ARCH_ name, see seccomp.SCMPArch) and
// denies every other with EPERM. With a base profile (as seccomp.Parse
// resolves it for this node) the result allows the union of both: base keeps its default
// action, architectures and rules, in their order, and a last rule allows
// the recorded syscalls that base does not already allow unconditionally.
// A recorded syscall that base handles with an unconditional rule of
// another action (SCMP_ACT_KILL_PROCESS for ptrace, say) stays as base says:
// base is policy. Those names are returned in kept, for the caller to
// report. The output depends only on the set of names and on base.
func BuildProfile(names []string, arch string, base *seccomp.Profile) (p *seccomp.Profile, kept []string) {
	eperm := uint(unix.EPERM)
	p = &seccomp.Profile{
		DefaultAction:   seccomp.ActErrno,
		DefaultErrnoRet: &eperm,
		Architectures:   []string{arch},
	}
	// handled: names that base already settles unconditionally, mapped
	// to whether it allows them.
	handled := map[string]bool{}
	if base != nil {
		p.DefaultAction = base.DefaultAction
		p.DefaultErrnoRet = base.DefaultErrnoRet
		p.Flags = slices.Clone(base.Flags)
		p.ListenerPath = base.ListenerPath
		p.ListenerMetadata = base.ListenerMetadata
		p.Architectures = append(p.Architectures, base.Architectures...)
		p.Syscalls = slices.Clone(base.Syscalls)
		for _, r := range base.Syscalls {
			if len(r.Args) != 0 {
				continue
			}
			for _, n := range r.Names {
				if _, seen := handled[n]; !seen {
					handled[n] = r.Action == seccomp.ActAllow
				}
			}
		}
	}
	slices.Sort(p.Architectures)
	p.Architectures = slices.Compact(p.Architectures)

	var add []string
	for _, n := range names {
		allow, settled := handled[n]
		switch {
		case !settled:
			add = append(add, n)
		case !allow:
			kept = append(kept, n)
		}
	}
	slices.Sort(add)
	add = slices.Compact(add)
	slices.Sort(kept)
	kept = slices.Compact(kept)
	if len(add) > 0 {
		p.Syscalls = append(p.Syscalls, seccomp.Syscall{Names: add, Action: seccomp.ActAllow})
	}
	return p, kept
}

// MarshalProfile renders p as indented JSON with a final newline.
func MarshalProfile(p *seccomp.Profile) ([]byte, error) {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode seccomp profile: %w", err)
	}
	return append(b, '\n'), nil
}
