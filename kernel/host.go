// Package kernel finds out what the running kernel can do for Kubernetes and
// for nodeshim: its identity, its configuration, its sysctls and real feature
// probes, collected in a requirement catalogue and rendered as a report.
package kernel

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
}

// DefaultHost returns the Host of the machine nodeshim runs on.
func DefaultHost() *Host {
	return &Host{ProcRoot: "/proc", SysRoot: "/sys", BootRoot: "/boot", ModulesRoot: "/lib/modules"}
}
