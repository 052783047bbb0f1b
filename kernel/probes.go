package kernel

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/nodeshim/nodeshim/kernel/capability"
)

// errnoText renders an error with the errno's name when it carries one,
// e.g. "EBADF (bad file descriptor)", so that evidence can be checked
// against the man page.
func errnoText(err error) string {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return err.Error()
	}
	name := errnoName(errno)
	switch {
	case name == "":
		return err.Error()
	case err == error(errno):
		return fmt.Sprintf("%s (%v)", name, err)
	default:
		return fmt.Sprintf("%v (%s)", err, name)
	}
}

// configNote renders the state of a config option for evidence, e.g.
// "CONFIG_PSI=y", or says that the config is unknown.
func configNote(h *Host, name string) string {
	if h.Config == nil {
		return "CONFIG_" + name + " unknown (no kernel config)"
	}
	if v, ok := h.Config.Value(name); ok {
		return "CONFIG_" + name + "=" + v
	}
	return "CONFIG_" + name + " unset"
}

// cmdlineHas reports whether the kernel command line has the word arg.
func cmdlineHas(h *Host, arg string) (bool, error) {
	p := filepath.Join(h.ProcRoot, "cmdline")
	b, err := os.ReadFile(p)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", p, err)
	}
	return slices.Contains(strings.Fields(string(b)), arg), nil
}

// psiResources are the pressure files the kubelet and nodeshim read.
var psiResources = []string{"cpu", "io", "memory"}

func probePSI(_ context.Context, h *Host) capability.Finding {
	for _, r := range psiResources {
		p := filepath.Join(h.ProcRoot, "pressure", r)
		_, err := os.ReadFile(p)
		switch {
		case err == nil:
			continue
		case errors.Is(err, fs.ErrNotExist):
			// Recent kernels leave /proc/pressure out altogether when PSI is off.
			if h.Config != nil && h.Config.Get("PSI") == Yes && h.Config.Get("PSI_DEFAULT_DISABLED") == Yes {
				if on, _ := cmdlineHas(h, "psi=1"); !on {
					return capability.Findingf(capability.Unsupported, "no %s: PSI disabled at boot (CONFIG_PSI_DEFAULT_DISABLED=y; boot with psi=1)", p)
				}
			}
			return capability.Findingf(capability.Unsupported, "no %s (%s)", p, configNote(h, "PSI"))
		case errors.Is(err, syscall.EOPNOTSUPP):
			// psi_show returns EOPNOTSUPP when PSI is compiled in but off:
			// CONFIG_PSI_DEFAULT_DISABLED without psi=1, or psi=0.
			return capability.Findingf(capability.Unsupported, "read %s: %s: PSI disabled at boot (%s; boot with psi=1)",
				p, errnoText(err), configNote(h, "PSI_DEFAULT_DISABLED"))
		default:
			return capability.Findingf(capability.Unknown, "read %s: %s", p, errnoText(err))
		}
	}
	ev := fmt.Sprintf("%s/pressure/{%s} readable", h.ProcRoot, strings.Join(psiResources, ","))
	if h.Config != nil && h.Config.Get("PSI_DEFAULT_DISABLED") == Yes {
		on, err := cmdlineHas(h, "psi=1")
		switch {
		case err != nil:
			ev += "; " + err.Error()
		case on:
			ev += "; CONFIG_PSI_DEFAULT_DISABLED=y, enabled by psi=1"
		}
	}
	l := CgroupLayoutOf(h.Mounts)
	if l.V2 == "" {
		return capability.Findingf(capability.Degraded, "%s; no cgroup2 mount, so no per-cgroup pressure", ev)
	}
	cp := filepath.Join(h.Path(l.V2), "memory.pressure")
	if _, err := os.Stat(cp); err != nil {
		return capability.Findingf(capability.Degraded, "%s; no per-cgroup pressure: %v", ev, err)
	}
	return capability.Findingf(capability.Supported, "%s; %s/memory.pressure present", ev, l.V2)
}

// The triggers tried: the one the pressure monitor arms
// (cgroup.DefaultTrigger: 100 ms of stall in a 500 ms window), which needs
// CAP_SYS_RESOURCE on the opener since Linux 6.5, and the same stall in a
// 2 s window, which any opener may arm on 6.5+ (unprivileged triggers need
// windows that are multiples of 2 s; the monitor widens to it too).
const (
	psiTrigger         = "some 100000 500000"
	psiTriggerUnpriv2s = "some 100000 2000000"
)

func probePSITriggers(_ context.Context, h *Host) capability.Finding {
	p := filepath.Join(h.ProcRoot, "pressure", "memory")
	err := h.calls().WritePSITrigger(p, psiTrigger)
	if err == nil {
		return capability.Findingf(capability.Supported, "wrote %q to %s: trigger armed", psiTrigger, p)
	}
	switch {
	case errors.Is(err, syscall.EINVAL):
		err2 := h.calls().WritePSITrigger(p, psiTriggerUnpriv2s)
		if err2 == nil {
			return capability.Findingf(capability.Degraded, "write %q to %s: %s; %q armed: without CAP_SYS_RESOURCE windows must be multiples of 2 s",
				psiTrigger, p, errnoText(err), psiTriggerUnpriv2s)
		}
		return capability.Findingf(capability.Unsupported, "write %q to %s: %s; %q: %s", psiTrigger, p, errnoText(err), psiTriggerUnpriv2s, errnoText(err2))
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.EOPNOTSUPP):
		return capability.Findingf(capability.Unsupported, "write %q to %s: %s (PSI absent or disabled)", psiTrigger, p, errnoText(err))
	case errors.Is(err, fs.ErrPermission):
		return capability.Findingf(capability.Unsupported, "write %q to %s: %s (before 6.5 triggers need CAP_SYS_RESOURCE)", psiTrigger, p, errnoText(err))
	default:
		return capability.Findingf(capability.Unknown, "write %q to %s: %s", psiTrigger, p, errnoText(err))
	}
}

func probeMountSetattr(_ context.Context, h *Host) capability.Finding {
	err := h.calls().MountSetattr()
	switch {
	case errors.Is(err, syscall.EBADF):
		return capability.Findingf(capability.Supported, "mount_setattr(-1, \"\", AT_EMPTY_PATH|AT_RECURSIVE, MOUNT_ATTR_RDONLY) = %s: the call exists", errnoText(err))
	case errors.Is(err, syscall.ENOSYS):
		return capability.Findingf(capability.Unsupported, "mount_setattr: %s", errnoText(err))
	case err == nil:
		return capability.Findingf(capability.Unknown, "mount_setattr on fd -1 succeeded, which it cannot")
	default:
		return capability.Findingf(capability.Unknown, "mount_setattr: %s (blocked by seccomp or an LSM?)", errnoText(err))
	}
}

func probeTmpfsNoswap(_ context.Context, h *Host) capability.Finding {
	err := h.calls().TmpfsFlag("noswap")
	switch {
	case err == nil:
		return capability.Findingf(capability.Supported, "fsconfig(tmpfs, \"noswap\") accepted (nothing mounted)")
	case errors.Is(err, syscall.EINVAL):
		return capability.Findingf(capability.Unsupported, "%s: tmpfs does not know noswap", errnoText(err))
	case errors.Is(err, syscall.ENOSYS):
		return capability.Findingf(capability.Unknown, "%s: no fsopen(2) (5.2) to ask with", errnoText(err))
	default:
		return capability.Findingf(capability.Unknown, "%s", errnoText(err))
	}
}

func probeSwap(_ context.Context, h *Host) capability.Finding {
	p := filepath.Join(h.ProcRoot, "swaps")
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return capability.Findingf(capability.Unsupported, "no %s (%s)", p, configNote(h, "SWAP"))
	}
	if err != nil {
		return capability.Findingf(capability.Unknown, "read %s: %v", p, err)
	}
	var devs []string
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) >= 3 {
			devs = append(devs, fmt.Sprintf("%s (%s, %s KiB)", f[0], f[1], f[2]))
		}
	}
	if len(devs) == 0 {
		return capability.Findingf(capability.Unsupported, "no active swap in %s (%s)", p, configNote(h, "SWAP"))
	}
	return capability.Findingf(capability.Supported, "%d active: %s", len(devs), strings.Join(devs, ", "))
}

func probeOverlayFS(_ context.Context, h *Host) capability.Finding {
	p := filepath.Join(h.ProcRoot, "filesystems")
	b, err := os.ReadFile(p)
	if err != nil {
		return capability.Findingf(capability.Unknown, "read %s: %v", p, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[len(f)-1] == "overlay" {
			return capability.Findingf(capability.Supported, "overlay registered in %s", p)
		}
	}
	switch {
	case h.Config == nil:
		return capability.Findingf(capability.Unknown, "overlay not in %s and no kernel config to tell whether it is a module", p)
	case h.Config.Get("OVERLAY_FS") == Module:
		return capability.Findingf(capability.Supported, "CONFIG_OVERLAY_FS=m: loaded on the first overlay mount")
	default:
		return capability.Findingf(capability.Unsupported, "overlay not in %s; %s", p, configNote(h, "OVERLAY_FS"))
	}
}

// Kernel versions that kube-proxy's nftables mode checks against.
var (
	nftablesKernel     = capability.V(5, 13, 0)
	nftablesKernelSkip = capability.V(5, 4, 0)
	nftMinTool         = capability.V(1, 0, 1)
	nftVersionRE       = regexp.MustCompile(`v(\d+)\.(\d+)(?:\.(\d+))?`)
)

func probeNFTables(ctx context.Context, h *Host) capability.Finding {
	gen, err := h.calls().NetfilterGeneration(ctx)
	switch {
	case errors.Is(err, syscall.EOPNOTSUPP), errors.Is(err, syscall.EPROTONOSUPPORT):
		return capability.Findingf(capability.Unsupported, "nf_tables not reachable over netlink: %s (%s)", errnoText(err), configNote(h, "NF_TABLES"))
	case err != nil:
		return capability.Findingf(capability.Unknown, "%s", errnoText(err))
	}
	ev := fmt.Sprintf("nf_tables answered NFT_MSG_GETGEN over netlink (generation %d)", gen)
	if h.IdentityErr != nil {
		return capability.Findingf(capability.Degraded, "%s; kernel version unknown: %v", ev, h.IdentityErr)
	}
	v := h.Identity.Version
	switch {
	case v.AtLeast(nftablesKernel):
		return capability.Findingf(capability.Supported, "%s", ev)
	case v.AtLeast(nftablesKernelSkip):
		return capability.Findingf(capability.Degraded, "%s; kernel %s < %s: kube-proxy needs nftables.skipKernelVersionCheck, not for production", ev, v, nftablesKernel)
	default:
		return capability.Findingf(capability.Unsupported, "%s; kernel %s < %s", ev, v, nftablesKernelSkip)
	}
}

// ParseNftVersion parses the output of `nft --version`, e.g.
// "nftables v1.0.6 (Lester Gooch #5)".
func ParseNftVersion(out string) (capability.Version, error) {
	m := nftVersionRE.FindStringSubmatch(out)
	if m == nil {
		return capability.Version{}, fmt.Errorf("no version in nft --version output %.60q", out)
	}
	var v [3]int
	for i := range v {
		if m[i+1] == "" {
			continue
		}
		n, err := strconv.Atoi(m[i+1])
		if err != nil || n > 1<<20 {
			return capability.Version{}, fmt.Errorf("bad version in nft --version output %.60q", out)
		}
		v[i] = n
	}
	return capability.V(v[0], v[1], v[2]), nil
}

func probeNftTool(ctx context.Context, h *Host) capability.Finding {
	out, err := h.calls().Run(ctx, "nft", "--version")
	if errors.Is(err, exec.ErrNotFound) {
		return capability.Findingf(capability.Supported, "nft not installed on the host (kube-proxy runs the nft of its own image)")
	}
	if err != nil {
		return capability.Findingf(capability.Unknown, "nft --version: %v: %s", err, strings.TrimSpace(out))
	}
	v, err := ParseNftVersion(out)
	if err != nil {
		return capability.Findingf(capability.Unknown, "%v", err)
	}
	line := strings.TrimSpace(out)
	if !v.AtLeast(nftMinTool) {
		return capability.Findingf(capability.Unsupported, "%s: older than %s", line, nftMinTool)
	}
	return capability.Findingf(capability.Supported, "%s", line)
}

func probeUserNS(_ context.Context, h *Host) capability.Finding {
	max := ReadSysctl(h.ProcRoot, "user.max_user_namespaces")
	maxEv := "user.max_user_namespaces " + strings.ToLower(string(max.State))
	if max.State == capability.SysctlPresent {
		maxEv = "user.max_user_namespaces=" + max.Value
		if max.Value == "0" {
			return capability.Findingf(capability.Unsupported, "%s: user namespaces disabled", maxEv)
		}
	}
	if err := h.calls().NewUserNamespace(); err != nil {
		return capability.Findingf(capability.Unsupported, "%s; %s", errnoText(err), maxEv)
	}
	return capability.Findingf(capability.Supported, "clone(CLONE_NEWUSER) succeeded; %s", maxEv)
}

func probeIdmapTmpfs(_ context.Context, h *Host) capability.Finding {
	err := h.calls().IdmapTmpfs()
	switch {
	case err == nil:
		return capability.Findingf(capability.Supported, "MOUNT_ATTR_IDMAP set on a detached tmpfs mount")
	case errors.Is(err, errUserNS):
		return capability.Findingf(capability.Unsupported, "%s", errnoText(err))
	case errors.Is(err, syscall.EINVAL):
		return capability.Findingf(capability.Unsupported, "%s: tmpfs cannot be idmapped", errnoText(err))
	case errors.Is(err, syscall.ENOSYS):
		return capability.Findingf(capability.Unsupported, "%s: no new mount API", errnoText(err))
	default:
		return capability.Findingf(capability.Unknown, "%s", errnoText(err))
	}
}

// sysctlProbe returns the probe of one sysctl: present is Supported with
// its value, absent Unsupported (naming the config option behind it when
// known), unreadable Unknown.
func sysctlProbe(name, configOption string) func(context.Context, *Host) capability.Finding {
	return func(_ context.Context, h *Host) capability.Finding {
		s := ReadSysctl(h.ProcRoot, name)
		switch s.State {
		case capability.SysctlPresent:
			v := s.Value
			if v == "" {
				v = "(empty)"
			}
			return capability.Findingf(capability.Supported, "%s = %s", s.Name, v)
		case capability.SysctlAbsent:
			ev := fmt.Sprintf("absent: no %s", s.Path)
			if configOption != "" {
				ev += " (" + configNote(h, configOption) + ")"
			}
			return capability.Findingf(capability.Unsupported, "%s", ev)
		default:
			return capability.Findingf(capability.Unknown, "%s", s.Error)
		}
	}
}
