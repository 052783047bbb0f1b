// Package procfs reads the per-process files of procfs (proc(5)) that
// nodeshim needs: a process's stat and status lines, its mount namespace,
// the process tree, and the system's uptime. Every function takes the
// directory procfs is mounted at ("/proc"), so that tests and a host's procfs
// seen from a container work alike. A process that exits while it is read
// gives an error wrapping ErrNoProcess.
package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNoProcess is wrapped when a pid has no directory under procfs, or its
// process exits while its files are read.
var ErrNoProcess = errors.New("no such process")

// ErrSyntax is wrapped by the parsers for content they cannot read.
var ErrSyntax = errors.New("malformed procfs file")

// gone reports whether err from reading a process's file means that the
// process does not exist (any more).
func gone(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH)
}

// readPID reads procRoot/PID/name; a vanished process wraps ErrNoProcess.
func readPID(procRoot string, pid int, name string) ([]byte, error) {
	path := filepath.Join(procRoot, strconv.Itoa(pid), name)
	b, err := os.ReadFile(path)
	if err != nil {
		if gone(err) {
			return nil, fmt.Errorf("read %s: %w", path, ErrNoProcess)
		}
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}

// Stat is what nodeshim reads of /proc/PID/stat.
type Stat struct {
	// State is the state letter (field 3).
	State byte
	// PPID is the parent's pid (field 4).
	PPID int
	// StartTime is when the process started, in clock ticks after boot
	// (field 22); 0 when the line stops before it.
	StartTime uint64
}

// ParseStat parses the content of /proc/PID/stat ("pid (comm) state ppid
// ..."). comm may hold spaces and parentheses, so the fields are counted
// from the last ')'. State and ppid are required, the start time only when
// the line has it.
func ParseStat(data []byte) (Stat, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return Stat{}, fmt.Errorf("%w: no ')' after comm", ErrSyntax)
	}
	fields := bytes.Fields(data[i+1:])
	if len(fields) < 2 {
		return Stat{}, fmt.Errorf("%w: %d fields after comm, want state and ppid", ErrSyntax, len(fields))
	}
	st := Stat{State: fields[0][0]}
	ppid, err := strconv.Atoi(string(fields[1]))
	if err != nil || ppid < 0 {
		return Stat{}, fmt.Errorf("%w: ppid %q", ErrSyntax, fields[1])
	}
	st.PPID = ppid
	if len(fields) >= 20 {
		if st.StartTime, err = strconv.ParseUint(string(fields[19]), 10, 64); err != nil {
			return Stat{}, fmt.Errorf("%w: starttime %q", ErrSyntax, fields[19])
		}
	}
	return st, nil
}

// ReadStat reads and parses procRoot/PID/stat.
func ReadStat(procRoot string, pid int) (Stat, error) {
	b, err := readPID(procRoot, pid, "stat")
	if err != nil {
		return Stat{}, err
	}
	st, err := ParseStat(b)
	if err != nil {
		return Stat{}, fmt.Errorf("parse %s: %w", filepath.Join(procRoot, strconv.Itoa(pid), "stat"), err)
	}
	return st, nil
}

// Status is what nodeshim reads of /proc/PID/status: enough to tell that a
// process runs, unfrozen and untraced.
type Status struct {
	// State is the state letter: R, S, D, T (stopped), t (traced), Z, X, I.
	State byte
	// TracerPid is the pid of the process that ptraces it, 0 if none.
	TracerPid int
	// Killed reports a SIGKILL pending for the thread (SigPnd) or its
	// thread group (ShdPnd): the process is on its way out, though it may
	// still run (or sit frozen in its cgroup) for a while.
	Killed bool
}

// Stopped reports whether the process is stopped by a signal or a tracer.
func (s Status) Stopped() bool { return s.State == 'T' || s.State == 't' }

// Gone reports whether the process is dead, a zombie, or killed: a
// SIGKILL pending, which no process survives.
func (s Status) Gone() bool { return s.State == 'Z' || s.State == 'X' || s.Killed }

// String formats s for logs and errors.
func (s Status) String() string {
	if s.Killed {
		return fmt.Sprintf("state %c, tracer pid %d, SIGKILL pending", s.State, s.TracerPid)
	}
	return fmt.Sprintf("state %c, tracer pid %d", s.State, s.TracerPid)
}

// ParseStatus parses the State and TracerPid lines of /proc/PID/status,
// both required, and the SigPnd and ShdPnd masks where present (hex, bit
// N-1 for signal N).
func ParseStatus(data []byte) (Status, error) {
	var st Status
	var haveState, haveTracer bool
	for _, line := range bytes.Split(data, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		v = bytes.TrimSpace(v)
		switch string(k) {
		case "State":
			if len(v) == 0 {
				return Status{}, fmt.Errorf("%w: empty State", ErrSyntax)
			}
			st.State, haveState = v[0], true
		case "TracerPid":
			n, err := strconv.Atoi(string(v))
			if err != nil {
				return Status{}, fmt.Errorf("%w: TracerPid %q", ErrSyntax, v)
			}
			st.TracerPid, haveTracer = n, true
		case "SigPnd", "ShdPnd":
			m, err := strconv.ParseUint(string(v), 16, 64)
			if err != nil {
				return Status{}, fmt.Errorf("%w: %s %q", ErrSyntax, k, v)
			}
			st.Killed = st.Killed || m&(1<<(9-1)) != 0
		}
	}
	if !haveState || !haveTracer {
		return Status{}, fmt.Errorf("%w: no State or TracerPid line", ErrSyntax)
	}
	return st, nil
}

// ReadStatus reads and parses procRoot/PID/status.
func ReadStatus(procRoot string, pid int) (Status, error) {
	b, err := readPID(procRoot, pid, "status")
	if err != nil {
		return Status{}, err
	}
	st, err := ParseStatus(b)
	if err != nil {
		return Status{}, fmt.Errorf("parse %s: %w", filepath.Join(procRoot, strconv.Itoa(pid), "status"), err)
	}
	return st, nil
}

// Comm returns procRoot/PID/comm without its newline.
func Comm(procRoot string, pid int) (string, error) {
	b, err := readPID(procRoot, pid, "comm")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// Cmdline returns the arguments in procRoot/PID/cmdline, empty ones left out.
func Cmdline(procRoot string, pid int) ([]string, error) {
	b, err := readPID(procRoot, pid, "cmdline")
	if err != nil {
		return nil, err
	}
	var args []string
	for _, a := range bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0}) {
		if len(a) > 0 {
			args = append(args, string(a))
		}
	}
	return args, nil
}

// MountNS returns the inode number of the mount namespace of process pid,
// from procRoot/PID/ns/mnt.
func MountNS(procRoot string, pid int) (uint64, error) {
	p := filepath.Join(procRoot, strconv.Itoa(pid), "ns", "mnt")
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		if gone(err) {
			return 0, fmt.Errorf("stat %s: %w", p, ErrNoProcess)
		}
		return 0, fmt.Errorf("stat %s: %w", p, err)
	}
	return st.Ino, nil
}

// Uptime returns the time since boot, the first field of procRoot/uptime.
func Uptime(procRoot string) (time.Duration, error) {
	path := filepath.Join(procRoot, "uptime")
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("parse %s: %w: empty", path, ErrSyntax)
	}
	secs, err := strconv.ParseFloat(f[0], 64)
	if err != nil || secs < 0 {
		return 0, fmt.Errorf("parse %s: %w: %q", path, ErrSyntax, f[0])
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// Descendants returns the roots and every process below them, from the
// ppid fields of procRoot/*/stat, sorted and unique. Processes that exit
// while the table is read are left out.
func Descendants(procRoot string, roots ...int) ([]uint32, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", procRoot, err)
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil || !e.IsDir() {
			continue
		}
		st, err := ReadStat(procRoot, p)
		if errors.Is(err, ErrNoProcess) {
			continue // exited meanwhile
		}
		if err != nil {
			return nil, err
		}
		children[st.PPID] = append(children[st.PPID], p)
	}
	var out []uint32
	seen := map[int]bool{}
	queue := slices.Clone(roots)
	for ; len(queue) > 0; queue = queue[1:] {
		p := queue[0]
		if seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, uint32(p))
		queue = append(queue, children[p]...)
	}
	slices.Sort(out)
	return out, nil
}
