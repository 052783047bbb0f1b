package bpf

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// ErrBadStat is wrapped by ParseStatPPID for a /proc/PID/stat line it cannot
// read.
var ErrBadStat = errors.New("malformed /proc/PID/stat")

// ParseStatPPID returns the parent pid from the content of /proc/PID/stat
// (proc(5): "pid (comm) state ppid ..."). comm may hold spaces and
// parentheses, so the fields are counted from the last ')'.
func ParseStatPPID(data []byte) (int, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("%w: no ')' after comm", ErrBadStat)
	}
	fields := bytes.Fields(data[i+1:])
	if len(fields) < 2 {
		return 0, fmt.Errorf("%w: %d fields after comm, want state and ppid", ErrBadStat, len(fields))
	}
	ppid, err := strconv.Atoi(string(fields[1]))
	if err != nil || ppid < 0 {
		return 0, fmt.Errorf("%w: ppid %q", ErrBadStat, fields[1])
	}
	return ppid, nil
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
		path := filepath.Join(procRoot, e.Name(), "stat")
		data, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, errESRCH) {
			continue // exited meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		ppid, err := ParseStatPPID(data)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", path, err)
		}
		children[ppid] = append(children[ppid], p)
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
