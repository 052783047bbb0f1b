// Package mountinfo parses /proc/PID/mountinfo (proc(5)), the one table of
// mounts that both the kernel report and the cgroup reader need.
package mountinfo

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// Entry is one line of a mountinfo file.
type Entry struct {
	// Root is the root of the mount within its filesystem ("/" unless a
	// sub-tree is bind-mounted).
	Root string
	// Point is the mount point as the reading process sees it.
	Point string
	// FSType is the filesystem type, e.g. "cgroup2" or "tmpfs".
	FSType string
	// Source is the mount source, e.g. "cgroup2" or "/dev/vda".
	Source string
	// SuperOptions are the per-superblock options, nil when the line has
	// none; for a cgroup v1 mount they name its controllers.
	SuperOptions []string
}

// ErrSyntax is wrapped by the errors Parse returns for malformed lines.
var ErrSyntax = errors.New("malformed mountinfo")

// Parse parses the contents of a mountinfo file:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// Fields up to the mount point are positional, optional fields end at "-",
// then come the filesystem type, source and super options. Paths are
// unescaped (the kernel writes space, tab, newline and backslash as \ooo).
// Blank lines are skipped; a malformed line is an error naming its number.
func Parse(data []byte) ([]Entry, error) {
	var entries []Entry
	for n := 1; len(data) > 0; n++ {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		f := strings.Fields(string(line))
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || len(f) < sep+3 {
			return nil, fmt.Errorf("%w: line %d: %.80q", ErrSyntax, n, line)
		}
		e := Entry{Root: unescape(f[3]), Point: unescape(f[4]), FSType: f[sep+1], Source: unescape(f[sep+2])}
		if len(f) > sep+3 {
			e.SuperOptions = strings.Split(f[sep+3], ",")
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// unescape undoes the kernel's \ooo escaping (fs/proc_namespace.c, mangle()).
func unescape(s string) string {
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
