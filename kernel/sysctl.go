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

// SysctlPath returns the file under procRoot/sys for a sysctl name. Dotted
// names have their dots turned into slashes; a name that already contains
// slashes (as Kubernetes allows, for interface names with dots such as
// "net/ipv4/conf/eth0.100/rp_filter") is taken as a path.
func SysctlPath(procRoot, name string) (string, error) {
	rel := name
	if !strings.Contains(name, "/") {
		rel = strings.ReplaceAll(name, ".", "/")
	}
	for _, c := range strings.Split(rel, "/") {
		if c == "" || c == "." || c == ".." {
			return "", fmt.Errorf("sysctl name %q: empty or relative path component", name)
		}
	}
	return filepath.Join(procRoot, "sys", rel), nil
}

// ReadSysctl reads the sysctl name under procRoot/sys.
func ReadSysctl(procRoot, name string) capability.Sysctl {
	s := capability.Sysctl{Name: name}
	p, err := SysctlPath(procRoot, name)
	if err != nil {
		s.State, s.Error = capability.SysctlUnreadable, err.Error()
		return s
	}
	s.Path = p
	b, err := os.ReadFile(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.State = capability.SysctlAbsent
	case err != nil:
		s.State, s.Error = capability.SysctlUnreadable, fmt.Sprintf("read %s: %v", p, err)
	default:
		s.State, s.Value = capability.SysctlPresent, strings.Join(strings.Fields(string(b)), " ")
	}
	return s
}

// SafeSysctl is a sysctl that Kubernetes lets every pod set (the kubelet's
// safe set) or that a node component relies on, with the first kernel that
// has it per network namespace.
type SafeSysctl struct {
	Name      string
	MinKernel capability.Version
	NeededBy  string
	// ConfigOption is the kernel option that provides the sysctl when it is
	// not always built in, e.g. "IP_VS".
	ConfigOption string
}

// SafeSysctls returns the kubelet's safe sysctls (pkg/kubelet/sysctl, with
// the kernels that namespaced them) and the sysctl kube-proxy's ipvs mode
// sets.
func SafeSysctls() []SafeSysctl {
	const safe = "Kubernetes: safe sysctl (pods may set it)"
	return []SafeSysctl{
		{"kernel.shm_rmid_forced", capability.Version{}, safe, ""},
		{"net.ipv4.ip_local_port_range", capability.Version{}, safe, ""},
		{"net.ipv4.tcp_syncookies", capability.V(4, 6, 0), safe, ""},
		{"net.ipv4.ping_group_range", capability.Version{}, safe, ""},
		{"net.ipv4.ip_unprivileged_port_start", capability.V(4, 11, 0), safe, ""},
		{"net.ipv4.ip_local_reserved_ports", capability.V(3, 16, 0), safe, ""},
		{"net.ipv4.tcp_keepalive_time", capability.V(4, 5, 0), safe, ""},
		{"net.ipv4.tcp_fin_timeout", capability.V(4, 6, 0), safe, ""},
		{"net.ipv4.tcp_keepalive_intvl", capability.V(4, 5, 0), safe, ""},
		{"net.ipv4.tcp_keepalive_probes", capability.V(4, 5, 0), safe, ""},
		{"net.ipv4.tcp_rmem", capability.V(4, 15, 0), safe, ""},
		{"net.ipv4.tcp_wmem", capability.V(4, 15, 0), safe, ""},
		{"net.ipv4.vs.conn_reuse_mode", capability.V(4, 1, 0), "Kubernetes: kube-proxy ipvs mode", "IP_VS"},
	}
}
