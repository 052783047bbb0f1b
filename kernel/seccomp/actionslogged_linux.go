package seccomp

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// ActionsLoggedFile is the sysctl, below procfs, that lists the seccomp
// actions the kernel logs (Linux 4.14, Documentation/userspace-api/seccomp_filter.rst):
// a SCMP_ACT_LOG hit reaches the audit log only while it lists "log".
const ActionsLoggedFile = "sys/kernel/seccomp/actions_logged"

// ErrActionsLogged is wrapped when the kernel cannot be made to log an
// action: the sysctl is missing (a kernel before 4.14) or read-only
// (procfs mounted read-only in a container without the host's /proc).
var ErrActionsLogged = errdefs.New(errdefs.ErrNotSupported, "seccomp actions_logged cannot be set")

// EnsureActionLogged makes the kernel log action (one of
// /proc/sys/kernel/seccomp/actions_avail's names, "log" for SCMP_ACT_LOG)
// by adding it to procRoot's actions_logged if it is not listed. It
// returns the list as it was and whether it wrote it. The change is
// node-wide: the other actions listed stay listed.
func EnsureActionLogged(procRoot, action string) (before []string, changed bool, err error) {
	path := filepath.Join(procRoot, ActionsLoggedFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, fmt.Errorf("%s: %w: the kernel has no such sysctl (Linux 4.14 added it)", path, ErrActionsLogged)
	}
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", path, err)
	}
	before = strings.Fields(string(data))
	if slices.Contains(before, action) {
		return before, false, nil
	}
	next := strings.Join(append(slices.Clone(before), action), " ")
	// A sysctl file is written in place: it has no content to lose and
	// cannot be renamed over.
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return before, false, fmt.Errorf("%s: %w: %w", path, ErrActionsLogged, err)
	}
	defer f.Close()
	if _, err := f.WriteString(next); err != nil {
		return before, false, fmt.Errorf("write %q to %s: %w: %w", next, path, ErrActionsLogged, err)
	}
	return before, true, nil
}
