package kernel

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// SysctlState tells apart a sysctl that this kernel does not have from one
// it has, and from one that could not be read.
type SysctlState string

// The states of a sysctl.
const (
	SysctlAbsent     SysctlState = "Absent"
	SysctlPresent    SysctlState = "Present"
	SysctlUnreadable SysctlState = "Unreadable"
)

// Sysctl is one sysctl as read through /proc/sys.
type Sysctl struct {
	// Name is the dotted name, e.g. "net.ipv4.tcp_syncookies".
	Name string `json:"name"`
	// Path is the file read.
	Path string `json:"path"`
	// State says whether the kernel has it.
	State SysctlState `json:"state"`
	// Value is the content with runs of white space (tabs between the
	// fields of tcp_rmem, say) turned into single spaces; set when Present.
	Value string `json:"value,omitempty"`
	// Error says why it could not be read; set when Unreadable.
	Error string `json:"error,omitempty"`
}

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
func ReadSysctl(procRoot, name string) Sysctl {
	s := Sysctl{Name: name}
	p, err := SysctlPath(procRoot, name)
	if err != nil {
		s.State, s.Error = SysctlUnreadable, err.Error()
		return s
	}
	s.Path = p
	b, err := os.ReadFile(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.State = SysctlAbsent
	case err != nil:
		s.State, s.Error = SysctlUnreadable, fmt.Sprintf("read %s: %v", p, err)
	default:
		s.State, s.Value = SysctlPresent, strings.Join(strings.Fields(string(b)), " ")
	}
	return s
}

// SafeSysctl is a sysctl that Kubernetes lets every pod set (the kubelet's
// safe set) or that a node component relies on, with the first kernel that
// has it per network namespace.
type SafeSysctl struct {
	Name      string
	MinKernel Version
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
		{"kernel.shm_rmid_forced", Version{}, safe, ""},
		{"net.ipv4.ip_local_port_range", Version{}, safe, ""},
		{"net.ipv4.tcp_syncookies", V(4, 6, 0), safe, ""},
		{"net.ipv4.ping_group_range", Version{}, safe, ""},
		{"net.ipv4.ip_unprivileged_port_start", V(4, 11, 0), safe, ""},
		{"net.ipv4.ip_local_reserved_ports", V(3, 16, 0), safe, ""},
		{"net.ipv4.tcp_keepalive_time", V(4, 5, 0), safe, ""},
		{"net.ipv4.tcp_fin_timeout", V(4, 6, 0), safe, ""},
		{"net.ipv4.tcp_keepalive_intvl", V(4, 5, 0), safe, ""},
		{"net.ipv4.tcp_keepalive_probes", V(4, 5, 0), safe, ""},
		{"net.ipv4.tcp_rmem", V(4, 15, 0), safe, ""},
		{"net.ipv4.tcp_wmem", V(4, 15, 0), safe, ""},
		{"net.ipv4.vs.conn_reuse_mode", V(4, 1, 0), "Kubernetes: kube-proxy ipvs mode", "IP_VS"},
	}
}
