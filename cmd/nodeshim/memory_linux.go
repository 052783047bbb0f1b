package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// codeMapping is one read-only mapping of the running executable (its code
// or read-only data), from /proc/self/maps.
type codeMapping struct {
	start, end uintptr
}

// executableMappings returns the mappings in maps (the text of a
// /proc/<pid>/maps file) that map the file exe and are not writable: the
// code and read-only data of the executable, not its data and bss, which
// a private writable mapping turns into anonymous memory.
func executableMappings(maps []byte, exe string) ([]codeMapping, error) {
	var out []codeMapping
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for n := 1; sc.Scan(); n++ {
		// address perms offset dev inode [path]; the path may hold
		// spaces, and ends in " (deleted)" once the file is replaced.
		f := strings.Fields(sc.Text())
		if len(f) < 6 {
			continue
		}
		path := strings.TrimSuffix(strings.Join(f[5:], " "), " (deleted)")
		if path != exe || len(f[1]) != 4 || f[1][1] == 'w' {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil || end <= start {
			return nil, fmt.Errorf("maps line %d: bad address range %q", n, f[0])
		}
		out = append(out, codeMapping{start: uintptr(start), end: uintptr(end)})
	}
	return out, sc.Err()
}

// pageOutCode asks the kernel to reclaim the pages of this executable's
// read-only mappings that only this process maps (MADV_PAGEOUT, Linux
// 5.4+), and returns how many bytes of mappings it advised.
//
// serve calls it once settled, beside debug.FreeOSMemory. Start-up (the
// capability report, the configuration, each source's first pass) runs
// code an idle daemon does not run again, and the kernel maps the file
// around every page fault (fault-around, 64 KiB by default), so after
// start-up most of the binary stays in serve's RSS and memory cgroup: 22-24
// MiB of file pages for a 31 MB binary. Paged out, what the daemon keeps
// running faults back in (BENCHMARKS.md, Footprint). The kernel leaves
// alone the pages another process maps as well (a `nodeshim report`
// running beside it), and dirty ones (a binary written moments before it
// started), which it does not write back for madvise.
func pageOutCode() (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	exe = strings.TrimSuffix(exe, " (deleted)")
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	ms, err := executableMappings(maps, exe)
	if err != nil {
		return 0, fmt.Errorf("/proc/self/maps: %w", err)
	}
	if len(ms) == 0 {
		return 0, fmt.Errorf("/proc/self/maps: no read-only mapping of %s", exe)
	}
	var advised int64
	var errs []error
	for _, m := range ms {
		// The range is not Go memory: madvise(2) by address, without
		// making a slice of it.
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_PAGEOUT); e != 0 {
			errs = append(errs, fmt.Errorf("madvise(%#x, %d, MADV_PAGEOUT) on %s: %w", m.start, m.end-m.start, exe, e))
			continue
		}
		advised += int64(m.end - m.start)
	}
	return advised, errors.Join(errs...)
}
