package nodevm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nodeshim/nodeshim/testenv/vmtest"
)

// Suite is the Debian suite of the node's userland and kernel.
const Suite = "trixie"

// KernelLabel is the testenv/vmtest kernel label of the node's kernel.
const KernelLabel = "6.12"

// RootfsPackages are the packages debootstrap adds to trixie's minbase: a
// systemd node (systemd 257 as init, dbus as a node has it for the systemd
// cgroup driver, kmod for the modules), crun 1.21, podman 5.4 (with its
// conmon and netavark; SQLite state) and CRIU 4.1.1 as trixie ships them,
// libcriu2, through which crun checkpoints (crun and podman recommend it,
// which debootstrap does not install), iproute2 and the CNI plugins (the
// pods' bridge), and procps for the journal's and a reader's sake.
func RootfsPackages() []string {
	return []string{
		"systemd", "systemd-sysv", "dbus", "kmod", "libseccomp2",
		"crun", "podman", "criu", "libcriu2", "iproute2", "containernetworking-plugins", "procps",
	}
}

// rootfsKey names a cached root filesystem by what makes it: the suite, the
// mirror and the package list.
func rootfsKey(mirror string, pkgs []string) string {
	h := sha256.Sum256([]byte(Suite + "\n" + mirror + "\n" + strings.Join(pkgs, ",")))
	return hex.EncodeToString(h[:6])
}

// Rootfs returns the cached trixie root filesystem under cacheDir, making
// it with debootstrap first when it is not cached. made says whether it
// was made now.
func Rootfs(ctx context.Context, run vmtest.Runner, cacheDir, mirror, keyring string) (dir string, made bool, err error) {
	pkgs := RootfsPackages()
	base := filepath.Join(cacheDir, "rootfs", Suite+"-"+rootfsKey(mirror, pkgs))
	dir = filepath.Join(base, "root")
	done := filepath.Join(base, "complete")
	if _, err := os.Stat(done); err == nil {
		return dir, false, nil
	}
	if err := os.RemoveAll(base); err != nil {
		return "", false, fmt.Errorf("clean %s: %w", base, err)
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", false, fmt.Errorf("create %s: %w", base, err)
	}
	tmp := dir + ".tmp"
	args := []string{
		"--variant=minbase", "--include=" + strings.Join(pkgs, ","),
		"--keyring=" + keyring, Suite, tmp, mirror,
	}
	if _, err := run(ctx, base, "debootstrap", args...); err != nil {
		log, _ := os.ReadFile(filepath.Join(tmp, "debootstrap", "debootstrap.log"))
		return "", false, fmt.Errorf("debootstrap %s into %s: %w\n%s", Suite, tmp, err, lastLines(string(log), 20))
	}
	// apt's downloaded packages are not needed on the node.
	debs, _ := filepath.Glob(filepath.Join(tmp, "var/cache/apt/archives/*.deb"))
	for _, d := range debs {
		if err := os.Remove(d); err != nil {
			return "", false, fmt.Errorf("clean %s: %w", d, err)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", false, fmt.Errorf("keep %s: %w", dir, err)
	}
	if err := os.WriteFile(done, []byte(strings.Join(pkgs, "\n")+"\n"), 0o644); err != nil {
		return "", false, fmt.Errorf("mark %s complete: %w", dir, err)
	}
	return dir, true, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// errNoModules is returned when the kernel's tree has no lib/modules/<release>.
var errNoModules = errors.New("no kernel modules")
