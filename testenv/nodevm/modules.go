package nodevm

import "github.com/nodeshim/nodeshim/testenv/vmtest"

// Modules lists the kernel modules the node carries from trixie's 6.12
// package, which builds them as modules (=m). The initramfs loads
// BootModules; systemd-modules-load loads the others at boot, as a node's
// /etc/modules-load.d does, and the kernel the rest on demand (kmod).
func Modules() []vmtest.Module {
	return append(BootModules(), []vmtest.Module{
		{Name: "overlay", Why: "containerd's overlayfs snapshotter"},
		{Name: "bridge", Why: "the CNI bridge plugin's pod network"},
		{Name: "stp", Why: "bridge depends on it"},
		{Name: "llc", Why: "bridge depends on it"},
		{Name: "veth", Why: "the CNI bridge plugin's pod interfaces"},
		{Name: "br_netfilter", Why: "kubelet's bridge-nf-call-iptables, as kubeadm's preflight wants it"},
		{Name: "nfnetlink", Why: "nf_tables depends on it"},
		{Name: "nf_tables", Why: "CRIU's network locking (nftables)"},
		{Name: "libcrc32c", Why: "nf_tables depends on it"},
		{Name: "inet_diag", Why: "CRIU dumps sockets through sock_diag"},
		{Name: "tcp_diag", Why: "CRIU's TCP socket dump"},
		{Name: "udp_diag", Why: "CRIU's UDP socket dump"},
		{Name: "unix_diag", Why: "CRIU's unix socket dump"},
		{Name: "netlink_diag", Why: "CRIU's netlink socket dump"},
		{Name: "raw_diag", Why: "CRIU's raw socket dump"},
		{Name: "packet_diag", Why: "CRIU's packet socket dump"},
		{Name: "af_packet_diag", Why: "CRIU's packet socket dump (older name)"},
		{Name: "tun", Why: "CRIU's kernel checks (criu check)"},
		{Name: "nf_conntrack", Why: "kube-proxy's and CRIU's connection tracking"},
		{Name: "nf_defrag_ipv4", Why: "nf_conntrack depends on it"},
		{Name: "nf_defrag_ipv6", Why: "nf_conntrack depends on it"},
		{Name: "nft_compat", Why: "iptables-nft's xtables matches, for kubelet's KUBE-FIREWALL chain"},
		{Name: "x_tables", Why: "nft_compat and the matches depend on it"},
		{Name: "xt_comment", Why: "kubelet's iptables rules carry comments"},
		{Name: "xt_conntrack", Why: "kubelet's rule dropping invalid localhost packets"},
		{Name: "virtio_net", Why: "the node's NIC on QEMU's user-mode network, to the API server"},
		{Name: "net_failover", Why: "virtio_net depends on it"},
		{Name: "failover", Why: "net_failover depends on it"},
		{Name: "nf_conntrack_netlink", Why: "CRIU dumps every network namespace's conntrack entries through " +
			"ctnetlink, also one it takes as external: where nfnetlink is loaded without it, nfnetlink " +
			"answers EINVAL and every container dump fails"},
	}...)
}

// BootModules are the modules the initramfs loads to mount the node's
// root filesystem: the virtio disk and ext4, with what they depend on.
func BootModules() []vmtest.Module {
	return []vmtest.Module{
		{Name: "virtio", Why: "the virtio bus"},
		{Name: "virtio_ring", Why: "the virtio bus"},
		{Name: "virtio_pci", Why: "QEMU's virtio devices are PCI devices"},
		{Name: "virtio_pci_modern_dev", Why: "virtio_pci depends on it"},
		{Name: "virtio_pci_legacy_dev", Why: "virtio_pci depends on it"},
		{Name: "virtio_blk", Why: "the root disk"},
		{Name: "ext4", Why: "the root filesystem"},
		{Name: "jbd2", Why: "ext4 depends on it"},
		{Name: "mbcache", Why: "ext4 depends on it"},
		{Name: "crc16", Why: "ext4 depends on it"},
		{Name: "crc32c_generic", Why: "ext4's and libcrc32c's crc32c"},
		{Name: "crc32c_intel", Why: "a faster crc32c where the CPU has SSE4.2"},
	}
}
