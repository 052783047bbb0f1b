package criu

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// ErrNoMemory says a checkpoint was refused before anything was frozen:
// CRIU's images go to a tmpfs (an encrypted checkpoint's work directory,
// or a checkpoint directory in memory), and the memory that tmpfs can
// take is less than they need. The message names the numbers.
var ErrNoMemory = errdefs.New(errdefs.ErrUnavailable, "not enough memory for the checkpoint's tmpfs")

// MemoryRoom is what a tmpfs can take before a write to it fails or
// memory runs out: the least of its own free space (its size limit), the
// node's available memory and what the writer's memory cgroup has below
// its limit (tmpfs pages are charged to the cgroup of the process that
// writes them: CRIU, a child of nodeshim).
type MemoryRoom struct {
	// Bytes is the least of the bounds below that are known.
	Bytes int64
	// Tmpfs is the tmpfs's free space (statfs f_bavail).
	Tmpfs int64
	// Available is the node's MemAvailable (proc(5) meminfo).
	Available int64
	// Cgroup is the memory cgroup's room: its limit (the least of its
	// and its ancestors') less its usage without inactive file pages,
	// which the kernel reclaims first; -1 when it has no limit or
	// cannot be read.
	Cgroup int64
	// CgroupDir is the memory cgroup read, for messages.
	CgroupDir string
}

// String names every bound, for a refusal.
func (m MemoryRoom) String() string {
	s := fmt.Sprintf("the tmpfs has %s free, the node has %s available (MemAvailable)", sizeString(m.Tmpfs), sizeString(m.Available))
	if m.Cgroup >= 0 {
		s += fmt.Sprintf(", nodeshim's memory cgroup %s has %s below its limit", m.CgroupDir, sizeString(m.Cgroup))
	}
	return s
}

// ReadMemoryRoom reads the room of the tmpfs dir for a writer in the
// memory cgroup of the process reading it (procRoot/self/cgroup, the
// cgroup filesystems under cgroupRoot, "/sys/fs/cgroup" when empty).
func ReadMemoryRoom(procRoot, cgroupRoot, dir string) (MemoryRoom, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	if cgroupRoot == "" {
		cgroupRoot = "/sys/fs/cgroup"
	}
	var m MemoryRoom
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return m, fmt.Errorf("statfs %s: %w", dir, err)
	}
	m.Tmpfs = int64(st.Bavail) * st.Bsize
	avail, err := memAvailable(filepath.Join(procRoot, "meminfo"))
	if err != nil {
		return m, err
	}
	m.Available = avail
	m.Cgroup, m.CgroupDir = cgroupRoom(procRoot, cgroupRoot)
	m.Bytes = min(m.Tmpfs, m.Available)
	if m.Cgroup >= 0 {
		m.Bytes = min(m.Bytes, m.Cgroup)
	}
	return m, nil
}

// memAvailable reads MemAvailable from the meminfo file path.
func memAvailable(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	for line := range bytes.Lines(b) {
		rest, ok := bytes.CutPrefix(line, []byte("MemAvailable:"))
		if !ok {
			continue
		}
		f := strings.Fields(string(rest))
		if len(f) != 2 || f[1] != "kB" {
			break
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 || kb > math.MaxInt64/1024 {
			break
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("%s: no MemAvailable line in kB", path)
}

// cgroupRoom is the room of this process's memory cgroup, and its
// directory; -1 when it has no limit or cannot be read (the node's
// MemAvailable still bounds the tmpfs).
func cgroupRoom(procRoot, cgroupRoot string) (int64, string) {
	b, err := os.ReadFile(filepath.Join(procRoot, "self", "cgroup"))
	if err != nil {
		return -1, ""
	}
	var v1, v2 string
	have2 := false
	for line := range strings.Lines(string(b)) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			v2, have2 = f[2], true
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == "memory" {
				v1 = f[2]
			}
		}
	}
	if v1 != "" {
		// cgroup v1 (Documentation/admin-guide/cgroup-v1/memory.rst):
		// memory.stat's hierarchical_memory_limit is the least limit on
		// the path to the root.
		dir := filepath.Join(cgroupRoot, "memory", v1)
		stat := readStat(filepath.Join(dir, "memory.stat"))
		limit, ok := stat["hierarchical_memory_limit"]
		usage, err := readInt(filepath.Join(dir, "memory.usage_in_bytes"))
		if !ok || err != nil || limit >= math.MaxInt64/2 {
			return -1, dir
		}
		return room(limit, usage, stat["total_inactive_file"]), dir
	}
	if have2 {
		// cgroup v2: the least memory.max from the cgroup up to the root.
		dir := filepath.Join(cgroupRoot, v2)
		limit := int64(-1)
		for d := dir; strings.HasPrefix(d, cgroupRoot); d = filepath.Dir(d) {
			if b, err := os.ReadFile(filepath.Join(d, "memory.max")); err == nil {
				if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && (limit < 0 || n < limit) {
					limit = n
				}
			}
			if d == cgroupRoot {
				break
			}
		}
		usage, err := readInt(filepath.Join(dir, "memory.current"))
		if limit < 0 || err != nil {
			return -1, dir
		}
		return room(limit, usage, readStat(filepath.Join(dir, "memory.stat"))["inactive_file"]), dir
	}
	return -1, ""
}

// room is limit less the usage that is not inactive file pages.
func room(limit, usage, inactiveFile int64) int64 {
	used := usage - inactiveFile
	if used < 0 {
		used = 0
	}
	if used > limit {
		return 0
	}
	return limit - used
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// readStat reads a memory.stat file's "key value" lines.
func readStat(path string) map[string]int64 {
	out := map[string]int64{}
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			out[k] = n
		}
	}
	return out
}

// checkMemoryRoom refuses, before CRIU runs, a checkpoint whose work
// directory work is on a tmpfs that cannot take need bytes (what says
// what they are).
func checkMemoryRoom(procRoot, work string, need int64, what string) error {
	m, err := ReadMemoryRoom(procRoot, "", work)
	if err != nil {
		return fmt.Errorf("memory for the tmpfs on %s: %w", work, err)
	}
	if need > m.Bytes {
		return fmt.Errorf("the checkpoint's work directory %s is a tmpfs, which takes %s in memory (%s), and it can take %s: %s: %w",
			work, sizeString(need), what, sizeString(m.Bytes), m, ErrNoMemory)
	}
	return nil
}

// sizeString formats n bytes for an error message: exact, and in MiB.
func sizeString(n int64) string {
	return fmt.Sprintf("%d bytes (%.1f MiB)", n, float64(n)/(1<<20))
}
