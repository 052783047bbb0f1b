package bpf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// NativeArch returns the OCI architecture name of the machine nodeshim was
// built for, e.g. SCMP_ARCH_X86_64: the architecture whose syscall numbers
// the recorder sees.
func NativeArch() (specs.Arch, error) {
	switch runtime.GOARCH {
	case "amd64":
		return specs.ArchX86_64, nil
	case "386":
		return specs.ArchX86, nil
	case "arm64":
		return specs.ArchAARCH64, nil
	case "arm":
		return specs.ArchARM, nil
	case "riscv64":
		return specs.ArchRISCV64, nil
	case "s390x":
		return specs.ArchS390X, nil
	case "ppc64le":
		return specs.ArchPPC64LE, nil
	case "loong64":
		return specs.ArchLOONGARCH64, nil
	}
	return "", fmt.Errorf("no OCI seccomp architecture for GOARCH %s", runtime.GOARCH)
}

// ErrBadProfile is wrapped by ParseProfile for input that is not a usable
// OCI seccomp profile.
var ErrBadProfile = errors.New("not an OCI seccomp profile")

// ParseProfile decodes an OCI runtime-spec seccomp profile (the JSON of a
// Kubernetes Localhost profile), as given to --base.
func ParseProfile(data []byte) (*specs.LinuxSeccomp, error) {
	var p specs.LinuxSeccomp
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadProfile, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the JSON object", ErrBadProfile)
	}
	if p.DefaultAction == "" {
		return nil, fmt.Errorf("%w: no defaultAction", ErrBadProfile)
	}
	for i, r := range p.Syscalls {
		if len(r.Names) == 0 || r.Action == "" {
			return nil, fmt.Errorf("%w: syscalls[%d] needs names and an action", ErrBadProfile, i)
		}
	}
	return &p, nil
}

// BuildProfile returns the OCI seccomp profile that allows the syscalls
// named in names on arch and denies every other with EPERM. With a base
// profile the result allows the union of both: base keeps its default
// action, architectures and rules, in their order, and a last rule allows
// the recorded syscalls that base does not already allow unconditionally.
// A recorded syscall that base handles with an unconditional rule of
// another action (SCMP_ACT_KILL_PROCESS for ptrace, say) stays as base says:
// base is policy. Those names are returned in kept, for the caller to
// report. The output depends only on the set of names and on base.
func BuildProfile(names []string, arch specs.Arch, base *specs.LinuxSeccomp) (p *specs.LinuxSeccomp, kept []string) {
	eperm := uint(unix.EPERM)
	p = &specs.LinuxSeccomp{
		DefaultAction:   specs.ActErrno,
		DefaultErrnoRet: &eperm,
		Architectures:   []specs.Arch{arch},
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
					handled[n] = r.Action == specs.ActAllow
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
		p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{Names: add, Action: specs.ActAllow})
	}
	return p, kept
}

// MarshalProfile renders p as indented JSON with a final newline.
func MarshalProfile(p *specs.LinuxSeccomp) ([]byte, error) {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode seccomp profile: %w", err)
	}
	return append(b, '\n'), nil
}
