package kernel

import (
	"fmt"
	"os"

	"github.com/nodeshim/nodeshim/internal/mountinfo"
)

// Mount is one line of /proc/PID/mountinfo.
type Mount struct {
	// Point is the mount point as the process sees it.
	Point string `json:"point"`
	// FSType is the filesystem type, e.g. "cgroup2" or "tmpfs".
	FSType string `json:"fsType"`
	// Source is the mount source, e.g. "cgroup2" or "/dev/vda".
	Source string `json:"source"`
	// SuperOptions are the per-superblock options; for a cgroup v1 mount
	// they name its controllers, e.g. "rw,cpu,cpuacct".
	SuperOptions []string `json:"superOptions"`
}

// ReadMountInfo reads and parses a mountinfo file.
func ReadMountInfo(path string) ([]Mount, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	m, err := ParseMountInfo(string(b))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return m, nil
}

// ParseMountInfo parses the text of /proc/PID/mountinfo (proc(5)); see
// mountinfo.Parse for the format and its errors.
func ParseMountInfo(s string) ([]Mount, error) {
	entries, err := mountinfo.Parse([]byte(s))
	if err != nil {
		return nil, err
	}
	mounts := make([]Mount, len(entries))
	for i, e := range entries {
		mounts[i] = Mount{Point: e.Point, FSType: e.FSType, Source: e.Source, SuperOptions: e.SuperOptions}
	}
	return mounts, nil
}
