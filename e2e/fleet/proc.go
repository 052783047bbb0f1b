package fleet

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of utime and stime in /proc/PID/stat: USER_HZ, 100
// on every Linux architecture Go supports (proc(5); the kernel converts
// from its own HZ for user space).
const userHZ = 100

// ProcUsage is a process's CPU time and resident memory at one moment.
type ProcUsage struct {
	// CPU is user plus system time.
	CPU time.Duration
	// RSS is the resident set size, VmRSS.
	RSS int64
}

// ReadProc reads the usage of process pid under procRoot (/proc).
func ReadProc(procRoot string, pid int) (ProcUsage, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return ProcUsage{}, fmt.Errorf("read process %d: %w", pid, err)
	}
	cpu, err := ParseStatCPU(stat)
	if err != nil {
		return ProcUsage{}, fmt.Errorf("%s: %w", filepath.Join(dir, "stat"), err)
	}
	st, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return ProcUsage{}, fmt.Errorf("read process %d: %w", pid, err)
	}
	rss, err := ParseStatusRSS(st)
	if err != nil {
		return ProcUsage{}, fmt.Errorf("%s: %w", filepath.Join(dir, "status"), err)
	}
	return ProcUsage{CPU: cpu, RSS: rss}, nil
}

// ParseStatCPU returns utime+stime from the contents of /proc/PID/stat.
// The command name (field 2) may hold spaces and parentheses: fields are
// counted after its last ')'.
func ParseStatCPU(stat []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name in %q", stat)
	}
	// After ") ": state is field 3; utime and stime are fields 14 and 15.
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 13", len(f))
	}
	var ticks uint64
	for _, s := range f[11:13] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("cpu time %q: %w", s, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// ParseStatusRSS returns VmRSS in bytes from the contents of
// /proc/PID/status.
func ParseStatusRSS(st []byte) (int64, error) {
	for line := range strings.Lines(string(st)) {
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("VmRSS line %q", strings.TrimSpace(line))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 {
			return 0, fmt.Errorf("VmRSS line %q", strings.TrimSpace(line))
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("no VmRSS line")
}

// FindProc returns the pid of the process whose executable is bin and
// whose command line holds arg, under procRoot: how the harness finds the
// etcd and kube-apiserver that testenv/kubetest started in its directory.
func FindProc(procRoot, bin, arg string) (int, error) {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return 0, fmt.Errorf("list processes: %w", err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "cmdline"))
		if err != nil {
			continue // gone, or not ours to read
		}
		args := strings.Split(string(cmd), "\x00")
		if len(args) == 0 || args[0] != bin {
			continue
		}
		for _, a := range args[1:] {
			if strings.Contains(a, arg) {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("no process %s with an argument holding %s", bin, arg)
}
