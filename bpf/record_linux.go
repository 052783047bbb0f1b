package bpf

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// RecordCommand runs cmd to completion while recording its syscalls and
// those of every process it starts, and returns the counts together with
// cmd's own error (an *exec.ExitError when it exited non-zero).
//
// cmd is started directly into a fresh cgroup under the cgroup v2 hierarchy
// at cgroup2Root (clone3 with CLONE_INTO_CGROUP, 5.7+), so the recording
// covers it from its first syscall, including the execve itself, and no
// process of the host outside it. The cgroup is removed afterwards.
func RecordCommand(cgroup2Root string, cmd *exec.Cmd) (counts []SyscallCount, runErr error, err error) {
	dir := filepath.Join(cgroup2Root, fmt.Sprintf("nodeshim-record-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("create recording cgroup: %w", err)
	}
	defer func() {
		// rmdir fails with EBUSY while a process is left in the cgroup,
		// e.g. a daemon that the command started and did not stop.
		if rmErr := os.Remove(dir); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("remove recording cgroup: %w", rmErr))
		}
	}()
	target, err := CgroupTargetFromPath(cgroup2Root, dir)
	if err != nil {
		return nil, nil, err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(fd)

	rec, err := NewRecorder(target)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if cerr := rec.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()

	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = fd
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	runErr = cmd.Wait()
	counts, err = rec.Counts()
	if err != nil {
		return nil, runErr, err
	}
	return counts, runErr, nil
}
