package seccomp

// #include "child_linux.h"
import "C"

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// The environment of the seccomp child (child_linux.c).
const (
	envChild   = C.NODESHIM_ENV_CHILD
	envProgFD  = C.NODESHIM_ENV_PROG_FD
	envFlags   = C.NODESHIM_ENV_FLAGS
	envProbeFD = C.NODESHIM_ENV_PROBE_FD
	envBenchN  = C.NODESHIM_ENV_BENCH_N
)

const (
	probeMagic    = C.NODESHIM_PROBE_MAGIC
	probeForklike = C.NODESHIM_PROBE_FORKLIKE
	probeI386     = C.NODESHIM_PROBE_I386
	probeExitlike = C.NODESHIM_PROBE_EXITLIKE
	probeExited   = C.NODESHIM_PROBE_EXITED
	probeHdrSize  = C.sizeof_struct_nodeshim_probe_hdr
	probeRecSize  = C.sizeof_struct_nodeshim_probe_rec
)

// selfExe is the running binary, which carries the seccomp child.
const selfExe = "/proc/self/exe"

// programFile writes the filter's program to a memfd. With cloexec false
// the descriptor survives execve(2).
func programFile(f *Filter, cloexec bool) (*os.File, error) {
	flags := 0
	if cloexec {
		flags = unix.MFD_CLOEXEC
	}
	fd, err := unix.MemfdCreate("nodeshim-seccomp-filter", flags)
	if err != nil {
		return nil, fmt.Errorf("memfd_create for the filter: %w", err)
	}
	file := os.NewFile(uintptr(fd), "nodeshim-seccomp-filter")
	if _, err := file.Write(EncodeProgram(f.Program)); err != nil {
		file.Close()
		return nil, fmt.Errorf("write filter to memfd: %w", err)
	}
	return file, nil
}

// ErrNotifyExec is returned by Command and Exec for a filter with NOTIFY
// rules: handing the listener to a seccomp agent is a container runtime's
// job, which nodeshim does not do.
var ErrNotifyExec = errors.New("profile uses SCMP_ACT_NOTIFY: handing the listener fd to a seccomp agent is not supported by seccomp exec")

// Exec replaces the calling process with path running argv under the
// filter: it re-executes this binary, which loads the filter (TSYNC,
// no_new_privs) before any thread exists and then execs path. The pid stays
// the same throughout. It returns only on error; nothing is installed then.
// A filter that would deny the syscalls the re-executed binary makes under
// it is refused first (CheckExec, ErrExecDenied), as is one with NOTIFY
// rules (ErrNotifyExec).
func Exec(ctx context.Context, f *Filter, path string, argv []string, env []string) error {
	if f.Notify {
		return ErrNotifyExec
	}
	if err := CheckExec(ctx, f); err != nil {
		return err
	}
	prog, err := programFile(f, false)
	if err != nil {
		return err
	}
	defer prog.Close()
	env = append(env[:len(env):len(env)],
		envChild+"=exec",
		envProgFD+"="+strconv.Itoa(int(prog.Fd())),
		envFlags+"="+strconv.FormatUint(uint64(f.Flags), 10))
	args := append([]string{"nodeshim-seccomp-exec", path}, argv...)
	if err := syscall.Exec(selfExe, args, env); err != nil {
		return fmt.Errorf("execve %s: %w", selfExe, err)
	}
	return nil
}

// probeRecord is one syscall invocation for the probe child and its result.
type probeRecord struct {
	Nr       int64
	Args     [6]uint64
	Forklike bool
	// I386 makes the call through the ia32 entry (int $0x80).
	I386 bool
	// ExitLike marks a call that may end the process (exit_group): a
	// normal exit during it is its answer, State probeExited with the exit
	// status in Ret.
	ExitLike bool

	State    uint32 // 0 pending, 1 started, 2 done, 3 (probeExited) exited in the call
	Ret      int64
	Errno    int32
	Trapped  bool
	TrapNr   int32
	TrapData int32
	// Signal is the signal the record's process died of before it
	// finished the record.
	Signal syscall.Signal
}

func encodeRecords(recs []probeRecord) []byte {
	b := make([]byte, probeHdrSize+len(recs)*probeRecSize)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], probeMagic)
	ne.PutUint32(b[4:], uint32(len(recs)))
	for i, r := range recs {
		o := b[probeHdrSize+i*probeRecSize:]
		ne.PutUint64(o[0:], uint64(r.Nr))
		for j, a := range r.Args {
			ne.PutUint64(o[8+8*j:], a)
		}
		var flags uint32
		if r.Forklike {
			flags |= probeForklike
		}
		if r.I386 {
			flags |= probeI386
		}
		if r.ExitLike {
			flags |= probeExitlike
		}
		ne.PutUint32(o[56:], flags)
	}
	return b
}

// decodeResults copies the child's results into recs; it returns the
// header's setup errno, whether the filter was installed and how many
// record processes were forked.
func decodeResults(b []byte, recs []probeRecord) (setupErrno syscall.Errno, installed bool, workers int) {
	ne := binary.NativeEndian
	setupErrno = syscall.Errno(ne.Uint32(b[8:]))
	installed = ne.Uint32(b[12:]) != 0
	workers = int(ne.Uint32(b[16:]))
	for i := range recs {
		o := b[probeHdrSize+i*probeRecSize:]
		r := &recs[i]
		r.State = ne.Uint32(o[60:])
		r.Ret = int64(ne.Uint64(o[64:]))
		r.Errno = int32(ne.Uint32(o[72:]))
		r.Trapped = ne.Uint32(o[76:]) != 0
		r.TrapNr = int32(ne.Uint32(o[80:]))
		r.TrapData = int32(ne.Uint32(o[84:]))
		r.Signal = syscall.Signal(int32(ne.Uint32(o[88:])))
	}
	return setupErrno, installed, workers
}

// ErrProbeSetup is wrapped when the probe child could not load the filter.
var ErrProbeSetup = errors.New("seccomp probe child setup")

// runProbes runs each of recs in a fresh process under f (unfiltered when
// f is nil), forked by one probe child that stays unfiltered, so that no
// record observes what an earlier one changed in its process. A record's
// process that dies before finishing it (a kill action, a trap whose
// handler cannot return, a call that faults) has the signal in Signal. It
// returns the number of record processes.
func runProbes(ctx context.Context, f *Filter, recs []probeRecord) (int, error) {
	if len(recs) == 0 {
		return 0, nil
	}
	fd, err := unix.MemfdCreate("nodeshim-seccomp-probe", unix.MFD_CLOEXEC)
	if err != nil {
		return 0, fmt.Errorf("memfd_create for probe records: %w", err)
	}
	mem := os.NewFile(uintptr(fd), "nodeshim-seccomp-probe")
	defer mem.Close()
	if _, err := mem.WriteAt(encodeRecords(recs), 0); err != nil {
		return 0, fmt.Errorf("write probe records: %w", err)
	}
	cmd := exec.CommandContext(ctx, selfExe)
	cmd.Args = []string{"nodeshim-seccomp-probe"}
	cmd.Env = []string{envChild + "=probe", envProbeFD + "=3"}
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
	runErr := cmd.Run()
	if ctx.Err() != nil {
		return 0, fmt.Errorf("seccomp probe: %w", ctx.Err())
	}
	buf := make([]byte, probeHdrSize+len(recs)*probeRecSize)
	if _, err := mem.ReadAt(buf, 0); err != nil {
		return 0, fmt.Errorf("read probe results: %w", err)
	}
	setupErrno, installed, workers := decodeResults(buf, recs)
	if setupErrno != 0 {
		return workers, fmt.Errorf("%w: load filter: %w", ErrProbeSetup, setupErrno)
	}
	if !installed {
		return workers, fmt.Errorf("%w: child ended before loading the filter: %v", ErrProbeSetup, runErr)
	}
	for i, r := range recs {
		if r.State != 2 && r.State != probeExited && r.Signal == 0 {
			return workers, fmt.Errorf("seccomp probe child stopped at record %d of %d (state %d): %v", i, len(recs), r.State, runErr)
		}
	}
	if runErr != nil {
		return workers, fmt.Errorf("seccomp probe child: %w", runErr)
	}
	return workers, nil
}
