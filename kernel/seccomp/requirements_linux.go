package seccomp

import (
	"context"
	"errors"
	"fmt"
	"unsafe"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/kernel/capability"
)

// seccomp(2) operations (include/uapi/linux/seccomp.h).
const (
	seccompSetModeFilter   = 1
	seccompGetActionAvail  = 2
	seccompGetNotifSizes   = 3
	filterFlagTSync        = 1 << 0
	filterFlagNewListener  = 1 << 3
	filterFlagTSyncESRCH   = 1 << 4
	filterFlagWaitKillable = 1 << 5
)

func seccompCall(op, flags uintptr, arg unsafe.Pointer) error {
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, op, flags, uintptr(arg))
	if errno != 0 {
		return errno
	}
	return nil
}

// ActionAvailable asks the kernel whether it knows a filter return action
// (SECCOMP_GET_ACTION_AVAIL, Linux 4.14). It returns nil when the action is
// available, an error wrapping EOPNOTSUPP when it is not, and EINVAL when
// the kernel predates the operation.
func ActionAvailable(ret uint32) error {
	err := seccompCall(seccompGetActionAvail, 0, unsafe.Pointer(&ret))
	if err != nil {
		return fmt.Errorf("seccomp(SECCOMP_GET_ACTION_AVAIL, %#x): %w", ret, err)
	}
	return nil
}

// FilterFlagAccepted reports whether seccomp(SECCOMP_SET_MODE_FILTER) knows
// the flags: called with a NULL program it checks the flags first (EINVAL
// for unknown ones) and then fails to copy the program (EFAULT), so nothing
// is installed.
func FilterFlagAccepted(flags uint) (bool, error) {
	err := seccompCall(seccompSetModeFilter, uintptr(flags), nil)
	switch {
	case errors.Is(err, unix.EFAULT):
		return true, nil
	case errors.Is(err, unix.EINVAL):
		return false, nil
	case err == nil:
		return false, fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER, %#x, NULL) succeeded", flags)
	}
	return false, fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER, %#x, NULL): %w", flags, err)
}

const neededByProfiles = "Kubernetes: seccompProfile RuntimeDefault and Localhost"

func actionRequirement(id, name string, ret uint32, min capability.Version, neededBy ...string) capability.Requirement {
	return capability.Requirement{
		ID:        "seccomp.action." + id,
		Group:     "seccomp",
		NeededBy:  neededBy,
		MinKernel: min,
		Probe: func(context.Context, capability.Host) capability.Finding {
			err := ActionAvailable(ret)
			switch {
			case err == nil:
				return capability.Findingf(capability.Supported, "seccomp(SECCOMP_GET_ACTION_AVAIL, %s) = 0", name)
			case errors.Is(err, unix.EOPNOTSUPP):
				return capability.Findingf(capability.Unsupported, "seccomp(SECCOMP_GET_ACTION_AVAIL, %s) = EOPNOTSUPP", name)
			case errors.Is(err, unix.EINVAL):
				return capability.Findingf(capability.Unknown, "seccomp(SECCOMP_GET_ACTION_AVAIL) = EINVAL: the kernel predates 4.14 and cannot be asked about %s", name)
			}
			return capability.Findingf(capability.Unknown, "%v", err)
		},
	}
}

// Requirements returns the seccomp entries of the kernel requirement
// catalogue. Their probes ask the running kernel through seccomp(2) (the
// Host roots play no part: seccomp has no file interface) and libseccomp
// for its API level.
func Requirements() []capability.Requirement {
	reqs := []capability.Requirement{{
		ID:        "seccomp.filter",
		Group:     "seccomp",
		NeededBy:  []string{neededByProfiles, "nodeshim: seccomp exec and verify"},
		MinKernel: capability.V(3, 17, 0),
		Probe: func(context.Context, capability.Host) capability.Finding {
			ok, err := FilterFlagAccepted(0)
			switch {
			case err != nil:
				if errors.Is(err, unix.ENOSYS) {
					return capability.Findingf(capability.Unsupported, "%v: no seccomp(2) (CONFIG_SECCOMP off or kernel before 3.17)", err)
				}
				return capability.Findingf(capability.Unknown, "%v", err)
			case !ok:
				return capability.Findingf(capability.Unsupported, "seccomp(SECCOMP_SET_MODE_FILTER, 0, NULL) = EINVAL: CONFIG_SECCOMP_FILTER is off")
			}
			return capability.Findingf(capability.Supported, "seccomp(SECCOMP_SET_MODE_FILTER, 0, NULL) = EFAULT: filter mode is available")
		},
	}}
	profiles := []string{neededByProfiles}
	reqs = append(reqs,
		actionRequirement("kill_process", "SECCOMP_RET_KILL_PROCESS", retKillProcess, capability.V(4, 14, 0), append(profiles, "OCI: SCMP_ACT_KILL_PROCESS")...),
		actionRequirement("kill_thread", "SECCOMP_RET_KILL_THREAD", retKillThread, capability.V(3, 5, 0), append(profiles, "OCI: SCMP_ACT_KILL, SCMP_ACT_KILL_THREAD")...),
		actionRequirement("trap", "SECCOMP_RET_TRAP", retTrap, capability.V(3, 5, 0), "OCI: SCMP_ACT_TRAP"),
		actionRequirement("errno", "SECCOMP_RET_ERRNO", retErrno, capability.V(3, 5, 0), append(profiles, "OCI: SCMP_ACT_ERRNO")...),
		actionRequirement("trace", "SECCOMP_RET_TRACE", retTrace, capability.V(3, 5, 0), "OCI: SCMP_ACT_TRACE"),
		actionRequirement("log", "SECCOMP_RET_LOG", retLog, capability.V(4, 14, 0), "OCI: SCMP_ACT_LOG", "Security Profiles Operator: profile recording via audit log"),
		actionRequirement("allow", "SECCOMP_RET_ALLOW", retAllow, capability.V(3, 5, 0), append(profiles, "OCI: SCMP_ACT_ALLOW")...),
		actionRequirement("user_notif", "SECCOMP_RET_USER_NOTIF", retUserNotif, capability.V(5, 0, 0), "OCI: SCMP_ACT_NOTIFY (seccomp agents)"),
		capability.Requirement{
			ID:        "seccomp.notify",
			Group:     "seccomp",
			NeededBy:  []string{"OCI: SCMP_ACT_NOTIFY with listenerPath (seccomp agents)"},
			MinKernel: capability.V(5, 0, 0),
			Probe: func(context.Context, capability.Host) capability.Finding {
				var sizes [3]uint16 // struct seccomp_notif_sizes
				if err := seccompCall(seccompGetNotifSizes, 0, unsafe.Pointer(&sizes)); err != nil {
					return capability.Findingf(capability.Unsupported, "seccomp(SECCOMP_GET_NOTIF_SIZES) = %v", err)
				}
				ok, err := FilterFlagAccepted(filterFlagNewListener | filterFlagTSync | filterFlagTSyncESRCH)
				if err != nil {
					return capability.Findingf(capability.Unknown, "%v", err)
				}
				if !ok {
					return capability.Findingf(capability.Degraded, "SECCOMP_GET_NOTIF_SIZES works (notif %d, resp %d, data %d bytes) but NEW_LISTENER|TSYNC|TSYNC_ESRCH is refused (kernel before 5.7)", sizes[0], sizes[1], sizes[2])
				}
				return capability.Findingf(capability.Supported, "SECCOMP_GET_NOTIF_SIZES: notif %d, resp %d, data %d bytes; NEW_LISTENER|TSYNC|TSYNC_ESRCH accepted", sizes[0], sizes[1], sizes[2])
			},
		},
		flagRequirement("tsync", "SECCOMP_FILTER_FLAG_TSYNC", filterFlagTSync, capability.V(3, 17, 0), "nodeshim: seccomp exec (filter on every thread)"),
		flagRequirement("log", "SECCOMP_FILTER_FLAG_LOG", 1<<1, capability.V(4, 14, 0), "OCI: flags SECCOMP_FILTER_FLAG_LOG"),
		flagRequirement("spec_allow", "SECCOMP_FILTER_FLAG_SPEC_ALLOW", 1<<2, capability.V(4, 17, 0), "OCI: flags SECCOMP_FILTER_FLAG_SPEC_ALLOW"),
		flagRequirement("wait_killable_recv", "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV", filterFlagNewListener|filterFlagWaitKillable, capability.V(5, 19, 0), "OCI: flags SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV"),
		capability.Requirement{
			ID:       "seccomp.libseccomp",
			Group:    "seccomp",
			NeededBy: []string{"nodeshim: compiling profiles (libseccomp API level 5 for NOTIFY, 2.5 for the binary tree)"},
			Probe: func(context.Context, capability.Host) capability.Finding {
				api, err := libseccomp.GetAPI()
				if err != nil {
					return capability.Findingf(capability.Unknown, "libseccomp %s: seccomp_api_get: %v", LibraryVersion(), err)
				}
				tree := "binary tree optimizer available"
				if !treeSupported() {
					tree = "no binary tree optimizer (libseccomp before 2.5)"
				}
				switch {
				case api >= 5 && treeSupported():
					return capability.Findingf(capability.Supported, "libseccomp %s, API level %d, %s", LibraryVersion(), api, tree)
				case api >= 3:
					return capability.Findingf(capability.Degraded, "libseccomp %s, API level %d (5 needed for NOTIFY), %s", LibraryVersion(), api, tree)
				}
				return capability.Findingf(capability.Unsupported, "libseccomp %s, API level %d: no KILL_PROCESS or LOG (level 3)", LibraryVersion(), api)
			},
		},
	)
	return reqs
}

func flagRequirement(id, name string, bits uint, min capability.Version, neededBy ...string) capability.Requirement {
	return capability.Requirement{
		ID:        "seccomp.flag." + id,
		Group:     "seccomp",
		NeededBy:  neededBy,
		MinKernel: min,
		Probe: func(context.Context, capability.Host) capability.Finding {
			ok, err := FilterFlagAccepted(bits)
			switch {
			case err != nil:
				return capability.Findingf(capability.Unknown, "%v", err)
			case !ok:
				return capability.Findingf(capability.Unsupported, "seccomp(SECCOMP_SET_MODE_FILTER, %s, NULL) = EINVAL", name)
			}
			return capability.Findingf(capability.Supported, "seccomp(SECCOMP_SET_MODE_FILTER, %s, NULL) = EFAULT: flag known", name)
		},
	}
}
