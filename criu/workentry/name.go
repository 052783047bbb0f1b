package workentry

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The names of the work entries: a dot, a prefix, the pid of the process
// that made it, "-" and random hex.
const (
	// WorkPrefix starts a work directory: CRIU's images, as large as the
	// dumped memory.
	WorkPrefix = ".nodeshim-work-"
	// TempPrefix and TempSuffix frame a temp archive being written.
	TempPrefix = ".nodeshim-tmp-"
	TempSuffix = ".tar"
)

// NewName returns a new entry name of this process: prefix +
// "<pid>-<random>" + suffix, prefix being WorkPrefix (suffix empty) or
// TempPrefix (suffix TempSuffix).
func NewName(prefix, suffix string) (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("random name: %w", err)
	}
	return prefix + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:]) + suffix, nil
}

// Parse returns the pid in a work entry's name, and false for a name that
// is not one.
func Parse(name string) (pid int, ok bool) {
	var rest string
	switch {
	case strings.HasPrefix(name, WorkPrefix):
		rest = name[len(WorkPrefix):]
	case strings.HasPrefix(name, TempPrefix) && strings.HasSuffix(name, TempSuffix) && len(name) > len(TempPrefix)+len(TempSuffix):
		rest = name[len(TempPrefix) : len(name)-len(TempSuffix)]
	default:
		return 0, false
	}
	pidStr, random, ok := strings.Cut(rest, "-")
	if !ok || random == "" || len(pidStr) > 10 || strings.Trim(random, "0123456789abcdef") != "" {
		return 0, false
	}
	pid, err := strconv.Atoi(pidStr)
	if err != nil || pid <= 0 || strconv.Itoa(pid) != pidStr {
		return 0, false
	}
	return pid, true
}
