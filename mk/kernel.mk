# kernel: `nodeshim report` and the kernel probes.
# nftables: the privileged tests check the probe of the host's `nft` tool
# (kube-proxy's nftables mode wants nft >= 1.0.1) against a real binary.
APT_PACKAGES += nftables
# The report collector runs probes on goroutines.
RACE_PKGS += ./kernel/
