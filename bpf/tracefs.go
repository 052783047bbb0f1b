package bpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/internal/mountinfo"
)

// TracefsMountPoint is where nodeshim mounts tracefs when none is mounted:
// the mount point the kernel documents (Documentation/trace/ftrace.rst) and
// creates, empty, in sysfs, and where systemd's sys-kernel-tracing.mount
// puts it on distributions that mount it at boot.
const TracefsMountPoint = "/sys/kernel/tracing"

// selfMountInfo is the mount table of nodeshim's own mount namespace, the
// one that cilium/ebpf searches for tracefs and the one a mount lands in.
const selfMountInfo = "/proc/self/mountinfo"

// tracefsMountFlags are those of systemd's sys-kernel-tracing.mount.
const tracefsMountFlags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_RELATIME

// findTracefs returns where tracefs is mounted in entries, "" when nowhere
// usable: a mount of the whole tracefs (a bind of one of its directories
// does not hold the events), else the tracing directory of a debugfs mount
// (where the kernel automounts tracefs, and where kernels before 4.1 keep
// the tracing files). This is cilium/ebpf's own search order, so the
// mount found here is the one its tracepoint and kprobe links use.
func findTracefs(entries []mountinfo.Entry) string {
	for _, e := range entries {
		if e.FSType == "tracefs" && e.Root == "/" {
			return e.Point
		}
	}
	for _, e := range entries {
		if e.FSType != "debugfs" || e.Root != "/" {
			continue
		}
		dir := filepath.Join(e.Point, "tracing")
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			return dir
		}
	}
	return ""
}

// ensureTracefs makes tracefs available in nodeshim's mount namespace:
// when the mount table (not the mere existence of /sys/kernel/tracing,
// which is an empty directory until something mounts tracefs there) shows
// none, it mounts tracefs at TracefsMountPoint. It returns where tracefs
// is and whether this call mounted it.
//
// The mount is left in place. On a host it is the host's mount namespace,
// and the mount is the standard one that systemd makes on most
// distributions, which other tracing tools expect too; in a pod it is the
// container's own mount namespace (the DaemonSet's host mounts do not
// propagate back) and goes away with the container. Mounts that others
// made are never touched.
//
// It must run before the first cilium/ebpf call that can use tracefs
// (link.Tracepoint, link.Kprobe without the kprobe PMU): cilium/ebpf looks
// tracefs up once per process and keeps a failure as well as a success.
func ensureTracefs() (point string, mounted bool, err error) {
	return ensureTracefsAt(selfMountInfo, TracefsMountPoint)
}

// ensureTracefsAt is ensureTracefs with the mount table read from table
// and tracefs mounted at target when the table shows none.
func ensureTracefsAt(table, target string) (point string, mounted bool, err error) {
	data, err := os.ReadFile(table)
	if err != nil {
		return "", false, fmt.Errorf("find tracefs: %w", err)
	}
	entries, err := mountinfo.Parse(data)
	if err != nil {
		return "", false, fmt.Errorf("find tracefs in %s: %w", table, err)
	}
	if p := findTracefs(entries); p != "" {
		return p, false, nil
	}
	if err := unix.Mount("tracefs", target, "tracefs", tracefsMountFlags, ""); err != nil {
		return "", false, mountError(target, err)
	}
	return target, true, nil
}

// mountError explains why mounting tracefs at target failed: the kernel
// lacks tracefs (wrapping ebpf.ErrNotSupported, so that the report calls
// the OOM watcher's tracepoint unsupported), or nodeshim lacks the
// privilege to mount it.
func mountError(target string, err error) error {
	switch {
	case errors.Is(err, unix.ENODEV):
		return fmt.Errorf("tracefs is not mounted and cannot be: mount tracefs at %s: %w (the kernel has no tracefs: CONFIG_TRACING=n): %w",
			target, err, ebpf.ErrNotSupported)
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("tracefs is not mounted and cannot be: mount tracefs at %s: %w (the kernel makes that directory when it has tracefs): %w",
			target, err, ebpf.ErrNotSupported)
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("tracefs is not mounted and nodeshim may not mount it: mount tracefs at %s: %w "+
			"(needs CAP_SYS_ADMIN in the initial user namespace: run nodeshim as root or in a privileged container, or mount tracefs there first)",
			target, err)
	}
	return fmt.Errorf("tracefs is not mounted: mount tracefs at %s: %w", target, err)
}

// kprobePMU reports whether the kernel offers the perf_kprobe PMU (4.17+),
// through which cilium/ebpf attaches a kprobe without tracefs.
func kprobePMU(sysRoot string) bool {
	_, err := os.Stat(filepath.Join(sysRoot, "bus/event_source/devices/kprobe/type"))
	return err == nil
}
