// Package kernel finds out what the running kernel can do for Kubernetes and
// for nodeshim: its identity, its configuration, its sysctls and real feature
// probes, collected in a requirement catalogue and rendered as a report.
package kernel

import (
	"context"
	"path/filepath"
	"strings"
)

// Host names the roots under which a node's kernel files are read, so that
// every reader can be pointed at testdata or at a host mounted under /host.
// Probes receive a *Host; fields beyond the roots are filled in once per
// report (identity, configuration) so that probes do not read them again.
type Host struct {
	// ProcRoot is where procfs is mounted, normally "/proc".
	ProcRoot string
	// SysRoot is where sysfs is mounted, normally "/sys".
	SysRoot string
	// BootRoot holds the kernel configs of installed kernels, normally "/boot".
	BootRoot string
	// ModulesRoot holds per-release module trees, normally "/lib/modules".
	ModulesRoot string

	// Calls makes the system calls and runs the tools that probes need
	// beyond reading files. Nil means the live kernel (LiveCalls).
	Calls Calls

	// Identity is the running kernel's identity, filled in by Load.
	Identity Identity
	// IdentityErr is why Identity could not be read, if it could not.
	IdentityErr error
	// Config is the running kernel's build configuration, filled in by
	// Load; nil when none was found (ConfigErr says why).
	Config *Config
	// ConfigErr is why Config is nil; it wraps ErrNoConfig when no config
	// file exists.
	ConfigErr error
	// Mounts is the mount table of the process (/proc/self/mountinfo),
	// filled in by Load.
	Mounts []Mount
	// MountsErr is why Mounts could not be read, if it could not.
	MountsErr error

	loaded bool
}

// DefaultHost returns the Host of the machine nodeshim runs on.
func DefaultHost() *Host {
	return &Host{ProcRoot: "/proc", SysRoot: "/sys", BootRoot: "/boot", ModulesRoot: "/lib/modules"}
}

// Load reads the facts that many probes share (identity, config, mounts),
// once; later calls do nothing. Failures are kept in the *Err fields, so
// that each probe can report Unknown with the reason.
func (h *Host) Load(ctx context.Context) {
	if h.loaded {
		return
	}
	h.loaded = true
	h.Identity, h.IdentityErr = ReadIdentity(h.ProcRoot)
	if h.IdentityErr == nil && h.Identity.Machine == "" {
		if m, err := h.calls().Machine(); err == nil {
			h.Identity.Machine, h.Identity.Arch = m, KubeArch(m)
		}
	}
	if h.IdentityErr == nil {
		h.Config, h.ConfigErr = LoadConfig(h, h.Identity.Raw)
	} else {
		h.ConfigErr = h.IdentityErr
	}
	h.Mounts, h.MountsErr = ReadMountInfo(filepath.Join(h.ProcRoot, "self/mountinfo"))
}

// Path maps an absolute path as the host sees it (a mount point from
// mountinfo, say "/sys/fs/cgroup/unified") to where it is read from under
// the injected roots.
func (h *Host) Path(p string) string {
	for _, r := range [...]struct{ prefix, root string }{
		{"/proc", h.ProcRoot},
		{"/sys", h.SysRoot},
		{"/boot", h.BootRoot},
		{"/lib/modules", h.ModulesRoot},
	} {
		if p == r.prefix || strings.HasPrefix(p, r.prefix+"/") {
			return filepath.Join(r.root, strings.TrimPrefix(p, r.prefix))
		}
	}
	return p
}

func (h *Host) calls() Calls {
	if h.Calls == nil {
		return LiveCalls{}
	}
	return h.Calls
}

// Calls is what probes do to the kernel beyond reading files: system calls
// with arguments chosen so that they change nothing, and tools they run.
// LiveCalls does them for real; tests substitute recorded outcomes.
type Calls interface {
	// Machine returns the kernel's machine name as uname(2) reports it.
	Machine() (string, error)
	// MountSetattr calls mount_setattr(2) with arguments that can only fail
	// and returns the error the kernel gave (ENOSYS when it lacks the call).
	MountSetattr() error
	// WritePSITrigger opens the pressure file at path and writes trigger
	// to it, as a PSI monitor does, then closes it (which frees the trigger).
	WritePSITrigger(path, trigger string) error
	// TmpfsFlag asks the kernel whether tmpfs accepts the mount flag option
	// (fsopen(2) and fsconfig(2), without mounting anything).
	TmpfsFlag(option string) error
	// NetfilterGeneration asks nf_tables over netlink for its ruleset
	// generation (NFT_MSG_GETGEN).
	NetfilterGeneration(ctx context.Context) (uint32, error)
	// NewUserNamespace creates a process in a new user namespace and reports
	// whether the kernel allowed it.
	NewUserNamespace() error
	// Run runs the named program with args and returns its combined output.
	// A program that is not installed yields an error wrapping
	// exec.ErrNotFound.
	Run(ctx context.Context, name string, args ...string) (string, error)
}
