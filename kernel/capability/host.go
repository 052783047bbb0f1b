package capability

import "context"

// Host is the node that probes examine and that a report describes. The
// kernel package's *kernel.Host is the one nodeshim uses; a probe outside
// the kernel package needs no more of it than Path.
type Host interface {
	// Path maps an absolute path as the host sees it (a mount point from
	// mountinfo, say "/sys/fs/cgroup/unified") to where it is read from:
	// the same path on the node itself, a path under /host in a container,
	// a testdata tree in a test.
	Path(p string) string
	// Describe reads, once, the facts that many probes share and returns
	// what the report says about the node beyond its requirements. The
	// collector calls it before any probe runs.
	Describe(ctx context.Context) Node
}

// Node is what a report says about a node beyond its requirements: the
// running kernel, which the version verdicts compare with, and its sysctls.
type Node struct {
	// Kernel is the running kernel's identity, config source and cgroup
	// layout.
	Kernel Kernel
	// Sysctls are the Kubernetes safe sysctls as read through /proc/sys.
	Sysctls []Sysctl
}

// Kernel is the identity part of a report.
type Kernel struct {
	Identity
	// Error is why the identity could not be read; the other fields are
	// then partly empty and version verdicts are Unknown.
	Error string `json:"error,omitempty"`
	// Labels are the well-known node labels the identity determines.
	Labels map[string]string `json:"labels"`
	// Config says where the kernel config was read from.
	Config ConfigInfo `json:"config"`
	// Cgroup is the cgroup layout from the mount table.
	Cgroup CgroupLayout `json:"cgroup"`
}

// ConfigInfo says where the kernel config came from, or why there is none.
type ConfigInfo struct {
	// Source is the file read, e.g. "/proc/config.gz".
	Source string `json:"source,omitempty"`
	// Options is the number of options set in it.
	Options int `json:"options"`
	// Error says why no config was read.
	Error string `json:"error,omitempty"`
}

// Release is a kernel release string (`uname -r`) taken apart: the upstream
// version, comparable, and whatever the distribution appended to it.
type Release struct {
	// Raw is the release exactly as the kernel reports it.
	Raw string `json:"release"`
	// Version is the upstream major.minor.patch; a missing patch is 0.
	Version Version `json:"version"`
	// Suffix is everything after the version: "-50-amd64" for Debian's
	// "6.1.0-50-amd64", "-427.el9.x86_64" for RHEL 9, "" for a bare
	// upstream build.
	Suffix string `json:"suffix"`
}

// Identity is who the running kernel is: its release and the architecture
// and operating system as the kubelet labels the node with them.
type Identity struct {
	Release
	// Machine is the kernel's own architecture name (`uname -m`).
	Machine string `json:"machine"`
	// Arch is the value of the kubernetes.io/arch label: Go's GOARCH
	// naming of Machine, e.g. "amd64" for x86_64. Empty when unknown.
	Arch string `json:"arch"`
	// OS is the value of the kubernetes.io/os label: "linux".
	OS string `json:"os"`
	// Build is the kernel's build string (`uname -v`), e.g.
	// "#1 SMP PREEMPT_DYNAMIC Debian 6.1.158-1".
	Build string `json:"build,omitempty"`
}

// Labels returns the well-known Kubernetes node labels that the identity
// determines.
func (id Identity) Labels() map[string]string {
	l := map[string]string{}
	if id.Arch != "" {
		l["kubernetes.io/arch"] = id.Arch
	}
	if id.OS != "" {
		l["kubernetes.io/os"] = id.OS
	}
	return l
}

// CgroupMode is how the cgroup hierarchies of a node are laid out.
type CgroupMode string

// The cgroup layouts a node can have.
const (
	// CgroupUnified is cgroup v2 alone, mounted at /sys/fs/cgroup.
	CgroupUnified CgroupMode = "unified"
	// CgroupHybrid is v1 hierarchies at /sys/fs/cgroup/* with cgroup2
	// mounted beside them (systemd's /sys/fs/cgroup/unified).
	CgroupHybrid CgroupMode = "hybrid"
	// CgroupLegacy is v1 hierarchies only.
	CgroupLegacy CgroupMode = "legacy"
	// CgroupNone means no cgroup filesystem is mounted.
	CgroupNone CgroupMode = "none"
)

// CgroupLayout is where the cgroup hierarchies are mounted.
type CgroupLayout struct {
	Mode CgroupMode `json:"mode"`
	// V2 is the mount point of cgroup2, as the host sees it; "" if none.
	V2 string `json:"v2,omitempty"`
	// V1 maps each mounted v1 controller to its mount point.
	V1 map[string]string `json:"v1,omitempty"`
}

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
