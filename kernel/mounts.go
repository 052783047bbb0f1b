package kernel

import (
	"fmt"
	"os"
	"strings"
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

// ParseMountInfo parses the text of /proc/PID/mountinfo (proc(5)):
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// Fields up to the mount point are positional, optional fields end at "-",
// then come the filesystem type, source and super options.
func ParseMountInfo(s string) ([]Mount, error) {
	var mounts []Mount
	for n, line := range strings.Split(s, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Fields(line)
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if len(f) < 7 || sep < 0 || len(f) < sep+3 {
			return nil, fmt.Errorf("line %d: not a mountinfo line: %.80q", n+1, line)
		}
		m := Mount{Point: unescapeOctal(f[4]), FSType: f[sep+1], Source: unescapeOctal(f[sep+2])}
		if len(f) > sep+3 {
			m.SuperOptions = strings.Split(f[sep+3], ",")
		}
		mounts = append(mounts, m)
	}
	return mounts, nil
}

// unescapeOctal undoes the kernel's \ooo escaping of space, tab, newline and
// backslash in mountinfo paths.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return '0' <= c && c <= '7' }
