package criu

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNoProcess is returned, wrapped, when a target pid does not exist.
var ErrNoProcess = errors.New("no such process")

// ProcState is what /proc/PID/status says about a process: enough to tell
// that it runs, unfrozen and untraced.
type ProcState struct {
	// State is the state letter: R, S, D, T (stopped), t (traced), Z, X, I.
	State byte
	// TracerPid is the pid of the process that ptraces it, 0 if none.
	TracerPid int
}

// Stopped reports whether the process is stopped by a signal or a tracer.
func (s ProcState) Stopped() bool { return s.State == 'T' || s.State == 't' }

// Gone reports whether the process is dead or a zombie.
func (s ProcState) Gone() bool { return s.State == 'Z' || s.State == 'X' }

// String formats s for logs and errors.
func (s ProcState) String() string {
	return fmt.Sprintf("state %c, tracer pid %d", s.State, s.TracerPid)
}

// ReadProcState reads procRoot/PID/status.
func ReadProcState(procRoot string, pid int) (ProcState, error) {
	path := filepath.Join(procRoot, strconv.Itoa(pid), "status")
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			return ProcState{}, fmt.Errorf("read %s: %w", path, ErrNoProcess)
		}
		return ProcState{}, fmt.Errorf("read %s: %w", path, err)
	}
	return parseProcStatus(path, b)
}

func parseProcStatus(path string, b []byte) (ProcState, error) {
	var st ProcState
	var haveState, haveTracer bool
	for _, line := range bytes.Split(b, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		v = bytes.TrimSpace(v)
		switch string(k) {
		case "State":
			if len(v) == 0 {
				return ProcState{}, fmt.Errorf("parse %s: empty State", path)
			}
			st.State, haveState = v[0], true
		case "TracerPid":
			n, err := strconv.Atoi(string(v))
			if err != nil {
				return ProcState{}, fmt.Errorf("parse %s: TracerPid %q: %w", path, v, err)
			}
			st.TracerPid, haveTracer = n, true
		}
	}
	if !haveState || !haveTracer {
		return ProcState{}, fmt.Errorf("parse %s: no State or TracerPid line", path)
	}
	return st, nil
}

// PIDTarget describes the process tree under pid on this host, read from
// procRoot: named pod "pid<N>", namespace "host" and container after the
// process's comm, so that its archive is
// checkpoint-pid<N>_host-<comm>-<time>.tar. now is used to date the process
// start from its boot-relative start time.
func PIDTarget(procRoot string, pid int, now time.Time) (Target, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	comm, err := os.ReadFile(filepath.Join(dir, "comm"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Target{}, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
		}
		return Target{}, fmt.Errorf("read %s/comm: %w", dir, err)
	}
	cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return Target{}, fmt.Errorf("read %s/cmdline: %w", dir, err)
	}
	var args []string
	for _, a := range bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0}) {
		if len(a) > 0 {
			args = append(args, string(a))
		}
	}
	created, err := processStart(procRoot, dir, now)
	if err != nil {
		return Target{}, err
	}
	return Target{
		Pid:     pid,
		Ref:     ContainerRef{Namespace: "host", Pod: "pid" + strconv.Itoa(pid), Container: sanitizeName(strings.TrimSpace(string(comm)))},
		ID:      "pid-" + strconv.Itoa(pid),
		Runtime: "host",
		Created: created,
		Args:    args,
	}, nil
}

// processStart computes when the process in dir started: field 22 of
// /proc/PID/stat is its start in clock ticks after boot (proc(5)); the boot
// time is now minus /proc/uptime.
func processStart(procRoot, dir string, now time.Time) (time.Time, error) {
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return time.Time{}, fmt.Errorf("read %s/stat: %w", dir, err)
	}
	// comm may hold spaces and parentheses: fields start after the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return time.Time{}, fmt.Errorf("parse %s/stat: no ')'", dir)
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 20 {
		return time.Time{}, fmt.Errorf("parse %s/stat: %d fields after comm", dir, len(fields))
	}
	ticks, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("parse %s/stat starttime %q: %w", dir, fields[19], err)
	}
	up, err := os.ReadFile(filepath.Join(procRoot, "uptime"))
	if err != nil {
		return time.Time{}, fmt.Errorf("read %s/uptime: %w", procRoot, err)
	}
	upFields := strings.Fields(string(up))
	if len(upFields) == 0 {
		return time.Time{}, fmt.Errorf("parse %s/uptime: empty", procRoot)
	}
	secs, err := strconv.ParseFloat(upFields[0], 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("parse %s/uptime %q: %w", procRoot, upFields[0], err)
	}
	// USER_HZ is 100 on every architecture Linux exposes to user space.
	const userHZ = 100
	boot := now.Add(-time.Duration(secs * float64(time.Second)))
	return boot.Add(time.Duration(ticks) * time.Second / userHZ).UTC().Truncate(time.Second), nil
}
