package kernel

// Catalogue returns the requirements that the kernel package probes itself:
// cgroups, PSI, mounts, swap, nftables, user namespaces and sysctls. The
// seccomp, eBPF and CRIU packages contribute their own lists; the report
// takes any concatenation of them.
func Catalogue() []Requirement {
	reqs := []Requirement{
		{
			ID: "cgroup.v2", Group: "cgroup", MinKernel: V(5, 8, 0),
			NeededBy: []string{"Kubernetes: cgroup v2 (v1 in maintenance mode since 1.31; 5.8+ recommended)", "nodeshim: cgroup v2 stats watcher"},
			Probe:    probeCgroupV2,
		},
		{
			ID: "cgroup.controllers", Group: "cgroup",
			NeededBy: []string{"Kubernetes: kubelet pod resources (cpu, cpuset, memory, pids)"},
			Probe:    probeCgroupControllers,
		},
		{
			ID: "cgroup.v2-controllers", Group: "cgroup",
			NeededBy: []string{"nodeshim: cgroup v2 stats and pressure per pod (cpu, io, memory, pids)"},
			Probe:    probeCgroupV2Controllers,
		},
		{
			ID: "cgroup.cpu-stat", Group: "cgroup", MinKernel: V(5, 8, 0),
			NeededBy: []string{"Kubernetes: node CPU stats from the root cgroup on cgroup v2", "nodeshim: node CPU usage"},
			Probe:    probeCgroupCPUStat,
		},
		{
			ID: "cgroup.freezer", Group: "cgroup", MinKernel: V(5, 2, 0),
			NeededBy: []string{"runc: pause and checkpoint (cgroup v2 freezer from 5.2)", "nodeshim: checkpoint"},
			Probe:    probeCgroupFreezer,
		},
		{
			ID: "psi.enabled", Group: "psi", MinKernel: V(4, 20, 0),
			NeededBy: []string{"Kubernetes: KubeletPSI (pressure metrics)", "nodeshim: pressure conditions"},
			Probe:    probePSI,
		},
		{
			ID: "psi.triggers", Group: "psi", MinKernel: V(5, 2, 0),
			NeededBy: []string{"nodeshim: pressure watcher (poll on PSI triggers)"},
			Probe:    probePSITriggers,
		},
		{
			ID: "mounts.mount-setattr", Group: "mounts", MinKernel: V(5, 12, 0),
			NeededBy: []string{"Kubernetes: RecursiveReadOnlyMounts", "runc: idmapped mounts"},
			Probe:    probeMountSetattr,
		},
		{
			ID: "mounts.overlayfs", Group: "mounts",
			NeededBy: []string{"containerd / CRI-O: overlayfs snapshotter"},
			Probe:    probeOverlayFS,
		},
		{
			ID: "swap.active", Group: "swap",
			NeededBy: []string{"Kubernetes: NodeSwap (LimitedSwap)"},
			Probe:    probeSwap,
		},
		{
			ID: "swap.tmpfs-noswap", Group: "swap", MinKernel: V(6, 4, 0),
			NeededBy: []string{"Kubernetes: NodeSwap (memory-backed emptyDir mounted noswap)"},
			Probe:    probeTmpfsNoswap,
		},
		{
			ID: "nftables.kernel", Group: "nftables", MinKernel: nftablesKernel,
			NeededBy: []string{"Kubernetes: kube-proxy nftables mode"},
			Probe:    probeNFTables,
		},
		{
			ID: "nftables.nft", Group: "nftables",
			NeededBy: []string{"Kubernetes: kube-proxy nftables mode (nft 1.0.1 or newer)"},
			Probe:    probeNftTool,
		},
		{
			ID: "userns.create", Group: "userns", MinKernel: V(3, 8, 0),
			NeededBy: []string{"Kubernetes: user namespaces for pods (hostUsers: false)"},
			Probe:    probeUserNS,
		},
	}
	for _, s := range SafeSysctls() {
		reqs = append(reqs, Requirement{
			ID: "sysctl." + s.Name, Group: "sysctl", MinKernel: s.MinKernel,
			NeededBy: []string{s.NeededBy},
			Probe:    sysctlProbe(s.Name, s.ConfigOption),
		})
	}
	return reqs
}
