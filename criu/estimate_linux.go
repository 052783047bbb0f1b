package criu

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// EstimateSize estimates the bytes of t's archive before anything is
// frozen: the resident memory (VmRSS, proc(5)) of every process of the
// tree under t.Pid, plus the size of the writable layer's upper directory
// when t has one. Resident memory counts file-backed pages CRIU does not
// dump and shared pages once per process, so the estimate errs on the
// large side, which is the safe side for a refusal.
func EstimateSize(procRoot string, t Target) (int64, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	var total int64
	seen := map[int]bool{}
	queue := []int{t.Pid}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		rss, err := residentBytes(procRoot, pid)
		if errors.Is(err, fs.ErrNotExist) && pid != t.Pid {
			continue // exited meanwhile
		}
		if err != nil {
			return 0, err
		}
		total += rss
		kids, err := childrenOf(procRoot, pid)
		if err != nil {
			return 0, err
		}
		queue = append(queue, kids...)
	}
	if t.Layer.Upper != "" {
		n, err := treeSize(t.Layer.Upper)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// residentBytes is VmRSS of pid in bytes; 0 for a kernel thread or zombie.
func residentBytes(procRoot string, pid int) (int64, error) {
	p := filepath.Join(procRoot, strconv.Itoa(pid), "status")
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("estimate archive size: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[0] == "VmRSS:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("estimate archive size: %s: VmRSS %q: %w", p, f[1], err)
			}
			return kb * 1024, nil
		}
	}
	return 0, nil
}

// childrenOf lists the children of every thread of pid
// (/proc/PID/task/TID/children, Linux 3.5 with CONFIG_PROC_CHILDREN, which
// CRIU itself requires).
func childrenOf(procRoot string, pid int) ([]int, error) {
	tasks, err := os.ReadDir(filepath.Join(procRoot, strconv.Itoa(pid), "task"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("estimate archive size: %w", err)
	}
	var out []int
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "task", task.Name(), "children"))
		if err != nil {
			continue // thread exited
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// treeSize sums the sizes of the regular files under dir.
func treeSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("estimate archive size: writable layer %s: %w", dir, err)
	}
	return n, nil
}
