package criu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nodeshim/nodeshim/internal/procfs"
)

// ErrNoProcess is returned, wrapped, when a target pid does not exist.
var ErrNoProcess = procfs.ErrNoProcess

// ProcState is what /proc/PID/status says about a process: enough to tell
// that it runs, unfrozen and untraced.
type ProcState = procfs.Status

// ReadProcState reads procRoot/PID/status.
func ReadProcState(procRoot string, pid int) (ProcState, error) {
	return procfs.ReadStatus(procRoot, pid)
}

// PIDTarget describes the process tree under pid on this host, read from
// procRoot: named pod "pid<N>", namespace "host" and container after the
// process's comm, so that its archive is
// checkpoint-pid<N>_host-<comm>-<time>.tar. now is used to date the process
// start from its boot-relative start time.
func PIDTarget(procRoot string, pid int, now time.Time) (Target, error) {
	comm, err := procfs.Comm(procRoot, pid)
	if errors.Is(err, ErrNoProcess) {
		return Target{}, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	if err != nil {
		return Target{}, err
	}
	args, err := procfs.Cmdline(procRoot, pid)
	if err != nil {
		return Target{}, err
	}
	created, err := processStart(procRoot, pid, now)
	if err != nil {
		return Target{}, err
	}
	return Target{
		Pid:     pid,
		Ref:     ContainerRef{Namespace: "host", Pod: "pid" + strconv.Itoa(pid), Container: sanitizeName(comm)},
		ID:      "pid-" + strconv.Itoa(pid),
		Runtime: "host",
		Created: created,
		Args:    args,
	}, nil
}

// processStart computes when process pid started: its start time in clock
// ticks after boot (proc(5)) after the boot time, now minus the uptime.
func processStart(procRoot string, pid int, now time.Time) (time.Time, error) {
	st, err := procfs.ReadStat(procRoot, pid)
	if err != nil {
		return time.Time{}, err
	}
	up, err := procfs.Uptime(procRoot)
	if err != nil {
		return time.Time{}, err
	}
	// USER_HZ is 100 on every architecture Linux exposes to user space.
	const userHZ = 100
	boot := now.Add(-up)
	return boot.Add(time.Duration(st.StartTime) * time.Second / userHZ).UTC().Truncate(time.Second), nil
}

// treeRSS is the resident memory of pid and its descendants, read from
// procRoot/PID/statm (resident pages, proc(5)); 0 when it cannot be read.
// Shared pages count once per process, so it is an upper bound of what
// CRIU writes for anonymous memory.
func treeRSS(procRoot string, pid int) int64 {
	pids, err := procfs.Descendants(procRoot, pid)
	if err != nil {
		return 0
	}
	var total int64
	for _, p := range pids {
		b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(int(p)), "statm"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			continue
		}
		if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			total += n * int64(os.Getpagesize())
		}
	}
	return total
}
