package seccomp

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"

	"golang.org/x/sys/unix"
)

// commandWith returns a command that runs path with argv (argv[0]
// included) under the filter: it starts as exe, the binary that carries the
// seccomp child, which sets no_new_privs, loads the filter with
// SECCOMP_FILTER_FLAG_TSYNC in a single-threaded process and execs path,
// keeping its pid. Tests run a copy of themselves as an unprivileged user.
// The caller must call the returned close function once it has started (or
// given up on) the command.
func commandWith(exe string, f *Filter, path string, argv ...string) (*exec.Cmd, func(), error) {
	if f.Notify {
		return nil, nil, ErrNotifyExec
	}
	prog, err := programFile(f, true)
	if err != nil {
		return nil, nil, err
	}
	cmd := &exec.Cmd{
		Path: exe,
		Args: append([]string{"nodeshim-seccomp-exec", path}, argv...),
		Env: append(os.Environ(),
			envChild+"=exec",
			envProgFD+"=3",
			envFlags+"="+strconv.FormatUint(uint64(f.Flags), 10)),
		ExtraFiles: []*os.File{prog},
	}
	return cmd, func() { prog.Close() }, nil
}

// timeSyscall runs n calls of nr(args) in a child under f (none when f is
// nil) and returns the nanoseconds they took inside the child, excluding
// the child's start and the filter's load. Benchmarks use it: a filter
// cannot be removed from the process that loaded it.
func timeSyscall(ctx context.Context, f *Filter, nr int64, args [6]uint64, n int) (int64, error) {
	fd, err := unix.MemfdCreate("nodeshim-seccomp-bench", unix.MFD_CLOEXEC)
	if err != nil {
		return 0, fmt.Errorf("memfd_create: %w", err)
	}
	mem := os.NewFile(uintptr(fd), "nodeshim-seccomp-bench")
	defer mem.Close()
	recs := []probeRecord{{Nr: nr, Args: args}}
	if _, err := mem.WriteAt(encodeRecords(recs), 0); err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, selfExe)
	cmd.Args = []string{"nodeshim-seccomp-bench"}
	cmd.Env = []string{envChild + "=bench", envProbeFD + "=3", envBenchN + "=" + strconv.Itoa(n)}
	cmd.ExtraFiles = []*os.File{mem}
	if f != nil {
		prog, err := programFile(f, true)
		if err != nil {
			return 0, err
		}
		defer prog.Close()
		cmd.Env = append(cmd.Env, envProgFD+"=4", envFlags+"="+strconv.FormatUint(uint64(f.Flags), 10))
		cmd.ExtraFiles = append(cmd.ExtraFiles, prog)
	}
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("seccomp bench child: %w", err)
	}
	buf := make([]byte, probeHdrSize+probeRecSize)
	if _, err := mem.ReadAt(buf, 0); err != nil {
		return 0, err
	}
	decodeResults(buf, recs)
	if recs[0].State != 2 {
		return 0, fmt.Errorf("seccomp bench child did not finish")
	}
	return recs[0].Ret, nil
}
