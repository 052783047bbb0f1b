// Package kernel finds out what the running kernel can do for Kubernetes and
// for nodeshim: its identity, its configuration, its sysctls and real feature
// probes, as a catalogue of capability requirements. The collector and the
// report they feed are package capability's.
package kernel

import (
	"context"
	"errors"
	"path/filepath"
	"strings"

	"github.com/nodeshim/nodeshim/internal/mountinfo"
	"github.com/nodeshim/nodeshim/kernel/capability"
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
	Identity capability.Identity
	// IdentityErr is why Identity could not be read, if it could not.
	IdentityErr error
	// Config is the running kernel's build configuration, filled in by
	// Load; nil when none was found (ConfigErr says why).
	Config *Config
	// ConfigErr is why Config is nil; it wraps ErrNoConfig when no config
	// file exists.
	ConfigErr error
	// Mounts is the node's mount table (/proc/1/mountinfo, else
	// /proc/self/mountinfo), filled in by Load.
	Mounts []mountinfo.Entry
	// MountsErr is why Mounts could not be read, if it could not.
	MountsErr error

	loaded bool
}

// DefaultHost returns the Host of the machine nodeshim runs on.
func DefaultHost() *Host {
	return &Host{ProcRoot: "/proc", SysRoot: "/sys", BootRoot: "/boot", ModulesRoot: "/lib/modules"}
}

// HostUnder returns the Host whose root filesystem is mounted at hostRoot
// ("/" on the host itself), with procfs at procRoot when it is not empty
// (a container sees the host's /proc elsewhere), else under hostRoot.
func HostUnder(hostRoot, procRoot string) *Host {
	def := DefaultHost()
	if procRoot == "" {
		procRoot = filepath.Join(hostRoot, def.ProcRoot)
	}
	return &Host{
		ProcRoot:    procRoot,
		SysRoot:     filepath.Join(hostRoot, def.SysRoot),
		BootRoot:    filepath.Join(hostRoot, def.BootRoot),
		ModulesRoot: filepath.Join(hostRoot, def.ModulesRoot),
	}
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
	h.Mounts, h.MountsErr = readHostMounts(h.ProcRoot)
}

// readHostMounts reads the mount table of pid 1, which is the node's when
// nodeshim shares the host's pid namespace (a DaemonSet with hostPID and
// the host's /proc at --proc-root), and falls back to the process's own.
func readHostMounts(procRoot string) ([]mountinfo.Entry, error) {
	m, err := readMountInfo(filepath.Join(procRoot, "1/mountinfo"))
	if err == nil {
		return m, nil
	}
	return readMountInfo(filepath.Join(procRoot, "self/mountinfo"))
}

// Describe loads the host's shared facts and returns the report's account
// of the node: the kernel's identity, where its config came from, the
// cgroup layout and the safe sysctls. It makes *Host a capability.Host.
func (h *Host) Describe(ctx context.Context) capability.Node {
	h.Load(ctx)
	k := capability.Kernel{Identity: h.Identity, Labels: h.Identity.Labels()}
	if h.IdentityErr != nil {
		k.Error = h.IdentityErr.Error()
	}
	if h.Config != nil {
		k.Config = capability.ConfigInfo{Source: h.Config.Source, Options: len(h.Config.Options)}
	} else if h.ConfigErr != nil {
		k.Config.Error = h.ConfigErr.Error()
	}
	k.Cgroup = CgroupLayoutOf(h.Mounts)
	sysctls := []capability.Sysctl{}
	for _, s := range SafeSysctls() {
		sysctls = append(sysctls, ReadSysctl(h.ProcRoot, s.Name))
	}
	return capability.Node{Kernel: k, Sysctls: sysctls}
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

// errUserNS marks a failure to create the user namespace a probe needed.
var errUserNS = errors.New("no user namespace")

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
	// IdmapTmpfs sets MOUNT_ATTR_IDMAP on a detached tmpfs mount with the
	// user namespace of a throwaway child. An error wrapping errUserNS
	// means no user namespace could be made for it.
	IdmapTmpfs() error
	// Run runs the named program with args and returns its combined output.
	// A program that is not installed yields an error wrapping
	// exec.ErrNotFound.
	Run(ctx context.Context, name string, args ...string) (string, error)
}
