package bpf

import (
	"fmt"
	"slices"

	libseccomp "github.com/seccomp/libseccomp-golang"
)

// SyscallName returns the name of syscall number nr on the native
// architecture. The names come from libseccomp's resolver, whose tables are
// generated from the kernel's own syscall tables (arch/*/entry/syscalls),
// so nodeshim keeps no list of its own; it is also the resolver that turns
// the profile's names back into numbers when the profile is enforced.
func SyscallName(nr uint32) (string, error) {
	if nr == OtherSyscall {
		return "", fmt.Errorf("syscall number outside the recorder's table (counted as %d)", OtherSyscall)
	}
	name, err := libseccomp.ScmpSyscall(int32(nr)).GetNameByArch(libseccomp.ArchNative)
	if err != nil {
		return "", fmt.Errorf("name of syscall %d on the native architecture: %w", nr, err)
	}
	return name, nil
}

// NamedCount is a SyscallCount with its name; Name is empty when the
// resolver does not know the number (a syscall newer than libseccomp).
type NamedCount struct {
	SyscallCount
	Name string
}

// NameCounts resolves the names of counts. Numbers without a name are kept
// with an empty Name, so that a caller can report them: a profile cannot
// allow a syscall by name that the resolver cannot name.
func NameCounts(counts []SyscallCount) []NamedCount {
	out := make([]NamedCount, 0, len(counts))
	for _, c := range counts {
		name, err := SyscallName(c.Nr)
		if err != nil {
			name = ""
		}
		out = append(out, NamedCount{SyscallCount: c, Name: name})
	}
	return out
}

// AllowedNames returns the sorted, unique names of the named counts.
func AllowedNames(named []NamedCount) []string {
	var names []string
	for _, n := range named {
		if n.Name != "" {
			names = append(names, n.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}
