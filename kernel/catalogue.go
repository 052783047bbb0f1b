package kernel

import (
	"context"

	"github.com/nodeshim/nodeshim/kernel/capability"
)

// onHost adapts a probe of the kernel's own facts to a capability probe.
// The collector hands every probe the host it describes, which for the
// kernel's requirements is a *Host; any other host gets Unknown.
func onHost(p func(context.Context, *Host) capability.Finding) func(context.Context, capability.Host) capability.Finding {
	return func(ctx context.Context, h capability.Host) capability.Finding {
		kh, ok := h.(*Host)
		if !ok {
			return capability.Findingf(capability.Unknown, "the kernel's probes need a *kernel.Host, not %T", h)
		}
		return p(ctx, kh)
	}
}

// Catalogue returns the requirements that the kernel package probes itself:
// cgroups, PSI, mounts, swap, nftables, user namespaces and sysctls. The
// seccomp, eBPF and CRIU packages contribute their own lists; the report
// takes any concatenation of them.
func Catalogue() []capability.Requirement {
	reqs := []capability.Requirement{
		{
			ID: "cgroup.v2", Group: "cgroup", MinKernel: capability.V(5, 8, 0),
			NeededBy: []string{"Kubernetes: cgroup v2 (v1 in maintenance mode since 1.31; 5.8+ recommended)", "nodeshim: cgroup v2 stats watcher"},
			Probe:    onHost(probeCgroupV2),
		},
		{
			ID: "cgroup.controllers", Group: "cgroup",
			NeededBy: []string{"Kubernetes: kubelet pod resources (cpu, cpuset, memory, pids)"},
			Probe:    onHost(probeCgroupControllers),
		},
		{
			ID: "cgroup.v2-controllers", Group: "cgroup",
			NeededBy: []string{"nodeshim: cgroup v2 stats and pressure per pod (cpu, io, memory, pids)"},
			Probe:    onHost(probeCgroupV2Controllers),
		},
		{
			ID: "cgroup.cpu-stat", Group: "cgroup", MinKernel: capability.V(5, 8, 0),
			NeededBy: []string{"Kubernetes: node CPU stats from the root cgroup on cgroup v2", "nodeshim: node CPU usage"},
			Probe:    onHost(probeCgroupCPUStat),
		},
		{
			ID: "cgroup.freezer", Group: "cgroup", MinKernel: capability.V(5, 2, 0),
			NeededBy: []string{"runc: pause and checkpoint (cgroup v2 freezer from 5.2)", "nodeshim: checkpoint"},
			Probe:    onHost(probeCgroupFreezer),
		},
		{
			ID: "psi.enabled", Group: "psi", MinKernel: capability.V(4, 20, 0),
			NeededBy: []string{"Kubernetes: KubeletPSI (pressure metrics)", "nodeshim: pressure conditions"},
			Probe:    onHost(probePSI),
		},
		{
			ID: "psi.triggers", Group: "psi", MinKernel: capability.V(5, 2, 0),
			NeededBy: []string{"nodeshim: pressure watcher (poll on PSI triggers)"},
			Probe:    onHost(probePSITriggers),
			Slow:     true,
			// Whether the kernel takes a 1 s window depends on its build,
			// its boot parameters (psi=) and CAP_SYS_RESOURCE: a BootCache
			// keys on all three.
			PerBoot: true,
		},
		{
			ID: "mounts.mount-setattr", Group: "mounts", MinKernel: capability.V(5, 12, 0),
			NeededBy: []string{"Kubernetes: RecursiveReadOnlyMounts", "runc: idmapped mounts"},
			Probe:    onHost(probeMountSetattr),
		},
		{
			ID: "mounts.overlayfs", Group: "mounts",
			NeededBy: []string{"containerd / CRI-O: overlayfs snapshotter"},
			Probe:    onHost(probeOverlayFS),
		},
		{
			ID: "swap.active", Group: "swap",
			NeededBy: []string{"Kubernetes: NodeSwap (LimitedSwap)"},
			Probe:    onHost(probeSwap),
		},
		{
			ID: "swap.tmpfs-noswap", Group: "swap", MinKernel: capability.V(6, 4, 0),
			NeededBy: []string{"Kubernetes: NodeSwap (memory-backed emptyDir mounted noswap)"},
			Probe:    onHost(probeTmpfsNoswap),
		},
		{
			ID: "nftables.kernel", Group: "nftables", MinKernel: nftablesKernel,
			NeededBy: []string{"Kubernetes: kube-proxy nftables mode"},
			Probe:    onHost(probeNFTables),
		},
		{
			ID: "nftables.nft", Group: "nftables",
			NeededBy: []string{"Kubernetes: kube-proxy nftables mode (nft 1.0.1 or newer)"},
			Probe:    onHost(probeNftTool),
			Slow:     true,
			Waits:    true,
		},
		{
			ID: "userns.create", Group: "userns", MinKernel: capability.V(3, 8, 0),
			NeededBy: []string{"Kubernetes: user namespaces for pods (hostUsers: false)"},
			Probe:    onHost(probeUserNS),
			Slow:     true,
			Waits:    true,
		},
		{
			ID: "userns.idmap-tmpfs", Group: "userns", MinKernel: capability.V(6, 3, 0),
			NeededBy: []string{"Kubernetes: user namespaces for pods (idmapped tmpfs volumes)"},
			Probe:    onHost(probeIdmapTmpfs),
			Slow:     true,
			Waits:    true,
		},
	}
	for _, s := range SafeSysctls() {
		reqs = append(reqs, capability.Requirement{
			ID: "sysctl." + s.Name, Group: "sysctl", MinKernel: s.MinKernel,
			NeededBy: []string{s.NeededBy},
			Probe:    onHost(sysctlProbe(s.Name, s.ConfigOption)),
		})
	}
	// Bridged pod traffic must traverse iptables/nftables for Services to
	// work on bridge CNIs; kubeadm's preflight checks this file. Its
	// absence usually means br_netfilter is not loaded.
	reqs = append(reqs, capability.Requirement{
		ID: "sysctl.net.bridge.bridge-nf-call-iptables", Group: "sysctl",
		NeededBy: []string{"Kubernetes: Services over bridge CNIs (br_netfilter; kubeadm preflight)"},
		Probe:    onHost(sysctlProbe("net.bridge.bridge-nf-call-iptables", "BRIDGE_NETFILTER")),
	})
	return reqs
}
