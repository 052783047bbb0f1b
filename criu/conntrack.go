package criu

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/kernel/capability"
)

// ConntrackModule is the kernel module that answers conntrack requests over
// netlink (ctnetlink). CRIU dumps the conntrack entries of every network
// namespace it checkpoints, a pod's too, through it; without it nfnetlink
// answers EINVAL and every container dump fails while dumping namespaces
// ("libnetlink.c:54: -22 reported by netlink").
const ConntrackModule = "nf_conntrack_netlink"

// conntrackFix is how a node gets ctnetlink, now and after a reboot.
const conntrackFix = "modprobe " + ConntrackModule + " (and list it in /etc/modules-load.d/ to keep it across reboots)"

// moduleState is what the kernel's module list and configuration say of
// ConntrackModule.
type moduleState int

const (
	// moduleUnknown: neither the module list nor a config nor a module
	// tree tells.
	moduleUnknown moduleState = iota
	// moduleLoaded: in /proc/modules or /sys/module.
	moduleLoaded
	// moduleBuiltin: CONFIG_NF_CT_NETLINK=y or listed in modules.builtin.
	moduleBuiltin
	// moduleNotLoaded: built as a module that is not loaded.
	moduleNotLoaded
	// moduleNotBuilt: the kernel was built without it.
	moduleNotBuilt
)

func (s moduleState) String() string {
	switch s {
	case moduleLoaded:
		return "loaded"
	case moduleBuiltin:
		return "built in"
	case moduleNotLoaded:
		return "built as a module, not loaded"
	case moduleNotBuilt:
		return "not built (CONFIG_NF_CT_NETLINK is not set)"
	}
	return "state unknown"
}

// asksKernel reports whether the probe may send ctnetlink a request: when
// the module is not loaded and could be, nfnetlink would load it on the
// request's behalf (request_module), and a report never changes the host.
func (s moduleState) asksKernel() bool {
	return s != moduleNotLoaded && s != moduleNotBuilt
}

// conntrackModuleState finds out from the files under h (the module list,
// the kernel config, the module tree of release) whether ConntrackModule is
// in the kernel. It reads, and never loads anything.
func conntrackModuleState(h capability.Host, release string) moduleState {
	if b, err := os.ReadFile(h.Path("/proc/modules")); err == nil && listsModule(b, ConntrackModule, true) {
		return moduleLoaded
	}
	if _, err := os.Stat(h.Path(filepath.Join("/sys/module", ConntrackModule))); err == nil {
		return moduleLoaded
	}
	tree := filepath.Join("/lib/modules", release)
	if b, err := os.ReadFile(h.Path(filepath.Join(tree, "modules.builtin"))); err == nil && listsModule(b, ConntrackModule, false) {
		return moduleBuiltin
	}
	for _, p := range []string{"/proc/config.gz", "/boot/config-" + release, filepath.Join(tree, "config")} {
		c, err := kernel.ReadConfigFile(h.Path(p))
		if err != nil {
			continue
		}
		switch c.Get("NF_CT_NETLINK") {
		case kernel.Yes:
			return moduleBuiltin
		case kernel.Module:
			return moduleNotLoaded
		default:
			return moduleNotBuilt
		}
	}
	if b, err := os.ReadFile(h.Path(filepath.Join(tree, "modules.dep"))); err == nil && listsModule(b, ConntrackModule, false) {
		return moduleNotLoaded
	}
	return moduleUnknown
}

// listsModule reports whether b, a /proc/modules (first field a name) or a
// modules.builtin / modules.dep (first field a path, …/NAME.ko[.xz]:), names
// module. Module names treat '-' and '_' alike.
func listsModule(b []byte, module string, names bool) bool {
	want := strings.ReplaceAll(module, "-", "_")
	s := bufio.NewScanner(bytes.NewReader(b))
	s.Buffer(make([]byte, 0, 4096), 1<<20)
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) == 0 {
			continue
		}
		name := strings.TrimSuffix(f[0], ":")
		if !names {
			name = filepath.Base(name)
			if i := strings.Index(name, ".ko"); i >= 0 {
				name = name[:i]
			} else {
				continue
			}
		}
		if strings.ReplaceAll(name, "-", "_") == want {
			return true
		}
	}
	return false
}

// conntrackFinding turns what is known of ConntrackModule and ctnetlink's
// answer to a conntrack request (askErr; nil when it answered) into the
// verdict on container dumps. asked says whether the request was sent.
func conntrackFinding(state moduleState, asked bool, askErr error) capability.Finding {
	missing := func(why string) capability.Finding {
		return capability.Findingf(capability.Unsupported,
			"%s: CRIU cannot dump a network namespace's conntrack entries, so every container dump fails (\"-22 reported by netlink\"); fix: %s",
			why, conntrackFix)
	}
	if !asked {
		switch state {
		case moduleNotBuilt:
			return capability.Findingf(capability.Unsupported,
				"%s %s: CRIU cannot dump a network namespace's conntrack entries, so every container dump fails; a kernel built with CONFIG_NF_CT_NETLINK is needed",
				ConntrackModule, state)
		default:
			return missing(fmt.Sprintf("%s %s (not asked: asking would load it)", ConntrackModule, state))
		}
	}
	switch {
	case askErr == nil:
		return capability.Findingf(capability.Supported, "ctnetlink answered IPCTNL_MSG_CT_GET_STATS_CPU (%s %s)", ConntrackModule, state)
	case errors.Is(askErr, syscall.EINVAL), errors.Is(askErr, syscall.ENOENT), errors.Is(askErr, syscall.EOPNOTSUPP):
		return missing(fmt.Sprintf("ctnetlink does not answer (%v; %s %s)", askErr, ConntrackModule, state))
	case errors.Is(askErr, syscall.EPROTONOSUPPORT):
		return missing(fmt.Sprintf("no nfnetlink in this kernel (%v)", askErr))
	case errors.Is(askErr, syscall.EPERM), errors.Is(askErr, syscall.EACCES):
		return capability.Findingf(capability.Unknown, "ctnetlink needs CAP_NET_ADMIN to be asked: %v (%s %s)", askErr, ConntrackModule, state)
	}
	return capability.Findingf(capability.Unknown, "ctnetlink could not be asked: %v (%s %s)", askErr, ConntrackModule, state)
}

// probeConntrack is the ctnetlink sub-check of criu.check: it reads the state
// of ConntrackModule and, when that cannot load anything, asks ctnetlink.
func probeConntrack(h capability.Host, ask func() error) capability.Finding {
	state := conntrackModuleState(h, kernelRelease())
	if !state.asksKernel() {
		return conntrackFinding(state, false, nil)
	}
	return conntrackFinding(state, true, ask())
}

// withConntrack adds the ctnetlink sub-check ct to check, criu.check's
// finding when `criu check` passed: criu check passes without ctnetlink,
// yet every container dump then fails, so a missing ctnetlink makes the
// entry Unsupported; a sub-check that could not decide is only noted.
func withConntrack(check, ct capability.Finding) capability.Finding {
	switch ct.Verdict {
	case capability.Supported:
		check.Evidence += "; " + ct.Evidence
	case capability.Unknown:
		check.Evidence += "; container dumps may fail: " + ct.Evidence
	default:
		check.Verdict = ct.Verdict
		check.Evidence += "; but " + ct.Evidence
	}
	return check
}
