# kernel: `nodeshim report` and the kernel probes.
# nftables (tests only): the privileged tests check the probe of the host's `nft` tool
# (kube-proxy's nftables mode wants nft >= 1.0.1) against a real binary.
TEST_APT_PACKAGES += nftables
