package seccomp

import (
	"context"
	"errors"
	"fmt"
	"strings"

	libseccomp "github.com/seccomp/libseccomp-golang"
)

// ErrExecDenied is wrapped by CheckExec's error when the filter would deny
// a syscall that Exec itself makes once the filter is loaded.
var ErrExecDenied = errors.New("the profile denies a syscall that seccomp exec makes under it")

// execStatus is the exit status the exit_group probe asks for: what a
// process that exits through the probe, not by any other way, returns.
const execStatus = 0x5a

// execNeeds are the syscalls Exec's child makes under the filter (see
// nodeshim_exec in child_linux.c): execve, to run the command, and
// exit_group, to end with 126 when execve fails for another reason (a
// filter that denies it leaves the process no way to exit but a fault:
// glibc's _exit then executes hlt, and the process dies of SIGSEGV).
// execve is probed with a path of -1, which the kernel answers EFAULT
// without running anything.
var execNeeds = []probeRecord{
	{Args: [6]uint64{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}},
	{Args: [6]uint64{execStatus}, ExitLike: true},
}

var execNeedNames = []string{"execve", "exit_group"}

// CheckExec proves on this kernel that Exec can run a command under f: in
// probe children, as Verify does, each syscall Exec's child makes after
// loading the filter (execve, exit_group) is called under f and without a
// filter, and must answer the same. A filter that denies one (an errno,
// ENOSYS from the prefix, a kill, a trap) is refused with ErrExecDenied
// naming the syscalls and what the kernel answered, before anything is
// loaded.
func CheckExec(ctx context.Context, f *Filter) error {
	native, err := nativeArch()
	if err != nil {
		return err
	}
	recs := make([]probeRecord, len(execNeeds))
	copy(recs, execNeeds)
	for i, name := range execNeedNames {
		nr, err := libseccomp.GetSyscallFromNameByArch(name, native)
		if err != nil {
			return fmt.Errorf("%s on %s: %w", name, native, err)
		}
		recs[i].Nr = int64(nr)
	}
	baseline := make([]probeRecord, len(recs))
	copy(baseline, recs)
	if _, err := runProbes(ctx, nil, baseline); err != nil {
		return fmt.Errorf("check the filter for seccomp exec: unfiltered baseline: %w", err)
	}
	if _, err := runProbes(ctx, f, recs); err != nil {
		return fmt.Errorf("check the filter for seccomp exec: %w", err)
	}
	var denied []string
	for i, r := range recs {
		b := baseline[i]
		if r.Signal != 0 || r.Trapped || r.State != b.State || r.Ret != b.Ret || r.Errno != b.Errno {
			denied = append(denied, fmt.Sprintf("%s (%s under the filter, %s without)", execNeedNames[i], observed(r), observed(b)))
		}
	}
	if len(denied) > 0 {
		return fmt.Errorf("%w: %s; it must allow execve to run the command and exit_group to end with 126 if execve fails", ErrExecDenied, strings.Join(denied, ", "))
	}
	return nil
}
