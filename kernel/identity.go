package kernel

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nodeshim/nodeshim/kernel/capability"
)

// ErrBadRelease is wrapped by ParseRelease when a release string does not
// start with major.minor.
var ErrBadRelease = errors.New("not a kernel release")

// maxVersionDigits bounds each version component so that parsing never
// overflows an int; no kernel has a component anywhere near this long.
const maxVersionDigits = 6

// ParseRelease parses a kernel release string such as "6.1.0-50-amd64",
// "5.14.0-427.el9.x86_64", "6.18.44-fc-v657" or "4.19". The major and minor
// numbers are required; the patch number is optional (0 when absent, as in
// "6.8-rc3"). Everything after the last number read is the suffix.
func ParseRelease(s string) (capability.Release, error) {
	var parts [3]int
	rest := s
	for i := range parts {
		if i > 0 {
			if !strings.HasPrefix(rest, ".") || len(rest) < 2 || !isDigit(rest[1]) {
				if i < 2 {
					return capability.Release{}, fmt.Errorf("parse kernel release %q: %w: no minor version", s, ErrBadRelease)
				}
				break
			}
			rest = rest[1:]
		}
		n := 0
		for n < len(rest) && isDigit(rest[n]) {
			n++
		}
		if n == 0 {
			return capability.Release{}, fmt.Errorf("parse kernel release %q: %w: no major version", s, ErrBadRelease)
		}
		if n > maxVersionDigits {
			return capability.Release{}, fmt.Errorf("parse kernel release %q: %w: version component %q too long", s, ErrBadRelease, rest[:n])
		}
		v := 0
		for _, c := range rest[:n] {
			v = v*10 + int(c-'0')
		}
		parts[i] = v
		rest = rest[n:]
	}
	return capability.Release{Raw: s, Version: capability.V(parts[0], parts[1], parts[2]), Suffix: rest}, nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// goarch maps `uname -m` to Go's GOARCH, which is what the kubelet puts in
// kubernetes.io/arch (it labels with runtime.GOARCH of its own binary).
var goarch = map[string]string{
	"x86_64":      "amd64",
	"amd64":       "amd64",
	"i386":        "386",
	"i486":        "386",
	"i586":        "386",
	"i686":        "386",
	"aarch64":     "arm64",
	"arm64":       "arm64",
	"aarch64_be":  "arm64be",
	"ppc64le":     "ppc64le",
	"ppc64":       "ppc64",
	"s390x":       "s390x",
	"riscv64":     "riscv64",
	"loongarch64": "loong64",
	"mips":        "mips",
	"mipsel":      "mipsle",
	"mips64":      "mips64",
}

// KubeArch returns the kubernetes.io/arch value for a `uname -m` machine
// name, or "" when there is none.
func KubeArch(machine string) string {
	if a, ok := goarch[machine]; ok {
		return a
	}
	if strings.HasPrefix(machine, "armv") || machine == "arm" {
		return "arm"
	}
	return ""
}

// ReadIdentity reads the kernel's identity from procfs under procRoot:
// sys/kernel/osrelease, ostype, arch and version (the files behind uname).
func ReadIdentity(procRoot string) (capability.Identity, error) {
	read := func(name string) (string, error) {
		p := filepath.Join(procRoot, "sys/kernel", name)
		b, err := os.ReadFile(p)
		if err != nil {
			return "", fmt.Errorf("read %s: %w", p, err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	var id capability.Identity
	raw, err := read("osrelease")
	if err != nil {
		return id, err
	}
	rel, err := ParseRelease(raw)
	if err != nil {
		return id, err
	}
	id.Release = rel
	ostype, err := read("ostype")
	if err != nil {
		return id, err
	}
	id.OS = strings.ToLower(ostype)
	// kernel.arch (utsname machine) is missing on older kernels: Machine
	// stays empty and Host.Load asks uname(2) instead.
	if m, err := read("arch"); err == nil {
		id.Machine = m
		id.Arch = KubeArch(m)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return id, err
	}
	// The build string is informative only.
	id.Build, _ = read("version")
	return id, nil
}
