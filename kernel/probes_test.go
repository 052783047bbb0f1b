package kernel

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/nodeshim/nodeshim/kernel/capability"
)

// TestProbeVerdicts runs each probe against the recorded hosts with the
// outcomes a kernel may give, and checks verdict and evidence.
func TestProbeVerdicts(t *testing.T) {
	type probe = func(context.Context, *Host) capability.Finding
	tests := []struct {
		name     string
		host     string
		calls    func(c *fakeCalls) // changes to the host's recorded calls
		probe    probe
		verdict  capability.Verdict
		evidence string
		host2    func(t *testing.T, h *Host) // changes to the loaded host
	}{
		{"cgroup v2 unified", "debian-6.1", nil, probeCgroupV2, capability.Supported, "cgroup2 mounted at /sys/fs/cgroup", nil},
		{"cgroup hybrid is a warning", "rhel-8.10", nil, probeCgroupV2, capability.Degraded, "hybrid: cgroup2 at /sys/fs/cgroup/unified, v1 hierarchies for blkio cpu cpuacct cpuset freezer memory pids", nil},
		{"controllers on v2", "debian-6.1", nil, probeCgroupControllers, capability.Supported, "v2: cpuset cpu io memory hugetlb pids rdma misc", nil},
		{"controllers on v1", "rhel-8.10", nil, probeCgroupControllers, capability.Supported, "v1: blkio cpu cpuacct cpuset freezer memory pids; v2 (unused by the kubelet): ", nil},
		{"v2 controllers for nodeshim", "debian-6.1", nil, probeCgroupV2Controllers, capability.Supported, "offers cpuset cpu io memory hugetlb pids rdma misc", nil},
		{"v2 controllers held by v1", "rhel-8.10", nil, probeCgroupV2Controllers, capability.Unsupported, "offers none; missing cpu io memory pids (held by v1: cpu@/sys/fs/cgroup/cpu,cpuacct", nil},
		{"root cpu.stat", "debian-6.1", nil, probeCgroupCPUStat, capability.Supported, "/sys/fs/cgroup/cpu.stat: usage_usec 5318277000", nil},
		{"no root cpu.stat before 5.8", "rhel-8.10", nil, probeCgroupCPUStat, capability.Unsupported, "no cpu.stat in the cgroup2 root /sys/fs/cgroup/unified", nil},
		{"v2 freezer in a child", "debian-6.1", nil, probeCgroupFreezer, capability.Supported, "v2 freezer: /sys/fs/cgroup/system.slice/cgroup.freeze", nil},
		{"v1 freezer in hybrid mode", "rhel-8.10", nil, probeCgroupFreezer, capability.Degraded, "v1 freezer at /sys/fs/cgroup/freezer (used in hybrid mode)", nil},

		{"psi on", "debian-6.1", nil, probePSI, capability.Supported, "pressure/{cpu,io,memory} readable; /sys/fs/cgroup/memory.pressure present", nil},
		{"psi backported and on", "rhel-8.10", nil, probePSI, capability.Degraded, "readable; CONFIG_PSI_DEFAULT_DISABLED=y, enabled by psi=1; no per-cgroup pressure", nil},
		{"psi off at boot", "rhel-8.10", nil, probePSI, capability.Unsupported, "PSI disabled at boot (CONFIG_PSI_DEFAULT_DISABLED=y; boot with psi=1)", func(t *testing.T, h *Host) {
			h.ProcRoot = t.TempDir()
			writeFile(t, filepath.Join(h.ProcRoot, "cmdline"), "ro quiet\n")
		}},
		{"psi not built", "debian-6.1", nil, probePSI, capability.Unsupported, "(CONFIG_PSI unset)", func(t *testing.T, h *Host) {
			h.ProcRoot = t.TempDir()
			h.Config = &Config{Options: map[string]string{}}
		}},
		{"trigger armed", "debian-6.1", nil, probePSITriggers, capability.Supported, `wrote "some 100000 500000"`, nil},
		{"trigger needs a 2 s window", "debian-6.1", func(c *fakeCalls) {
			c.psi = map[string]error{psiTrigger: errnoOf("EINVAL"), psiTriggerUnpriv2s: nil}
		}, probePSITriggers, capability.Degraded, `EINVAL (invalid argument); "some 100000 2000000" armed`, nil},
		{"triggers rejected", "debian-6.1", func(c *fakeCalls) {
			c.psi = map[string]error{psiTrigger: errnoOf("EINVAL"), psiTriggerUnpriv2s: errnoOf("EINVAL")}
		}, probePSITriggers, capability.Unsupported, `"some 100000 2000000": EINVAL`, nil},
		{"trigger without CAP_SYS_RESOURCE before 6.5", "debian-6.1", func(c *fakeCalls) {
			c.psi = map[string]error{psiTrigger: errnoOf("EPERM")}
		}, probePSITriggers, capability.Unsupported, "EPERM", nil},
		{"trigger, psi absent", "debian-6.1", func(c *fakeCalls) {
			c.psi = map[string]error{psiTrigger: errnoOf("ENOENT")}
		}, probePSITriggers, capability.Unsupported, "PSI absent or disabled", nil},
		{"triggers on rhel 8", "rhel-8.10", nil, probePSITriggers, capability.Supported, "trigger armed", nil},
		{"trigger, odd error", "debian-6.1", func(c *fakeCalls) {
			c.psi = map[string]error{psiTrigger: errors.New("statfs: boom")}
		}, probePSITriggers, capability.Unknown, "statfs: boom", nil},

		{"mount_setattr exists", "debian-6.1", nil, probeMountSetattr, capability.Supported, "EBADF", nil},
		{"mount_setattr absent on 4.18", "rhel-8.10", nil, probeMountSetattr, capability.Unsupported, "ENOSYS", nil},
		{"mount_setattr missing", "debian-6.1", func(c *fakeCalls) { c.mountSetattr = errnoOf("ENOSYS") }, probeMountSetattr, capability.Unsupported, "ENOSYS", nil},
		{"mount_setattr blocked", "debian-6.1", func(c *fakeCalls) { c.mountSetattr = errnoOf("EPERM") }, probeMountSetattr, capability.Unknown, "EPERM", nil},
		{"mount_setattr succeeded", "debian-6.1", func(c *fakeCalls) { c.mountSetattr = nil }, probeMountSetattr, capability.Unknown, "cannot", nil},

		{"tmpfs noswap unknown option", "debian-6.1", nil, probeTmpfsNoswap, capability.Unsupported, "EINVAL", nil},
		{"tmpfs noswap accepted", "debian-6.1", func(c *fakeCalls) { c.tmpfs = nil }, probeTmpfsNoswap, capability.Supported, "accepted", nil},
		{"tmpfs noswap without fsopen", "debian-6.1", func(c *fakeCalls) { c.tmpfs = errnoOf("ENOSYS") }, probeTmpfsNoswap, capability.Unknown, "fsopen", nil},
		{"swap active", "debian-6.1", nil, probeSwap, capability.Supported, "1 active: /dev/sda3 (partition, 999420 KiB)", nil},
		{"no swap", "rhel-8.10", nil, probeSwap, capability.Unsupported, "no active swap", nil},
		{"overlay missing", "debian-6.1", nil, probeOverlayFS, capability.Unsupported, "overlay not in", func(t *testing.T, h *Host) {
			h.ProcRoot = t.TempDir()
			writeFile(t, filepath.Join(h.ProcRoot, "filesystems"), "nodev\ttmpfs\n")
			h.Config = &Config{Options: map[string]string{}}
		}},
		{"overlay registered", "debian-6.1", nil, probeOverlayFS, capability.Supported, "overlay registered in ../testdata/hosts/debian-6.1/proc/filesystems", nil},
		{"overlay module", "rhel-8.10", nil, probeOverlayFS, capability.Supported, "CONFIG_OVERLAY_FS=m", nil},

		{"nf_tables on 6.1", "debian-6.1", nil, probeNFTables, capability.Supported, "generation 7", nil},
		{"nf_tables missing", "debian-6.1", func(c *fakeCalls) { c.genErr = errnoOf("ENOTSUP") }, probeNFTables, capability.Unsupported, "CONFIG_NF_TABLES=m", nil},
		{"nf_tables refused", "debian-6.1", func(c *fakeCalls) { c.genErr = errnoOf("EPERM") }, probeNFTables, capability.Unknown, "EPERM", nil},
		{"nf_tables on 4.18", "rhel-8.10", nil, probeNFTables, capability.Unsupported, "kernel 4.18.0 < 5.4.0", nil},
		{"nf_tables on 5.10 needs the skip flag", "debian-6.1", nil, probeNFTables, capability.Degraded, "skipKernelVersionCheck", func(_ *testing.T, h *Host) {
			h.Identity.Version = capability.V(5, 10, 0)
		}},
		{"nf_tables, version unknown", "debian-6.1", nil, probeNFTables, capability.Degraded, "kernel version unknown", func(_ *testing.T, h *Host) {
			h.IdentityErr = errors.New("no osrelease")
		}},
		{"nft 1.0.6", "debian-6.1", nil, probeNftTool, capability.Supported, "nftables v1.0.6 (Lester Gooch #5)", nil},
		{"nft too old", "debian-6.1", func(c *fakeCalls) {
			c.run = map[string]runResult{"nft": {out: "nftables v0.9.8 (E.D.S.)\n"}}
		}, probeNftTool, capability.Unsupported, "older than 1.0.1", nil},
		{"nft garbage", "debian-6.1", func(c *fakeCalls) {
			c.run = map[string]runResult{"nft": {out: "hello\n"}}
		}, probeNftTool, capability.Unknown, "no version", nil},
		{"nft fails", "debian-6.1", func(c *fakeCalls) {
			c.run = map[string]runResult{"nft": {out: "segfault", err: errors.New("exit status 139")}}
		}, probeNftTool, capability.Unknown, "exit status 139: segfault", nil},
		{"nft not installed", "debian-6.1", func(c *fakeCalls) { c.run = nil }, probeNftTool, capability.Supported, "not installed", nil},
		{"rhel 8 nft", "rhel-8.10", nil, probeNftTool, capability.Unsupported, "nftables v0.9.3 (Topsy): older than 1.0.1", nil},

		{"userns", "debian-6.1", nil, probeUserNS, capability.Supported, "clone(CLONE_NEWUSER) succeeded; user.max_user_namespaces=63422", nil},
		{"userns off by sysctl", "rhel-8.10", nil, probeUserNS, capability.Unsupported, "user.max_user_namespaces=0", nil},
		{"userns refused", "debian-6.1", func(c *fakeCalls) { c.userns = errnoOf("EPERM") }, probeUserNS, capability.Unsupported, "EPERM", nil},

		{"tmpfs not idmappable before 6.3", "debian-6.1", nil, probeIdmapTmpfs, capability.Unsupported, "EINVAL): tmpfs cannot be idmapped", nil},
		{"no user namespace for the idmap", "rhel-8.10", nil, probeIdmapTmpfs, capability.Unsupported, "no user namespace: clone CLONE_NEWUSER: no space left on device (ENOSPC)", nil},
		{"tmpfs idmapped", "debian-6.1", func(c *fakeCalls) { c.idmap = nil }, probeIdmapTmpfs, capability.Supported, "MOUNT_ATTR_IDMAP set", nil},
		{"idmap odd error", "debian-6.1", func(c *fakeCalls) { c.idmap = errors.New("find own executable: gone") }, probeIdmapTmpfs, capability.Unknown, "gone", nil},
		{"sysctl present", "debian-6.1", nil, sysctlProbe("net.ipv4.tcp_rmem", ""), capability.Supported, "net.ipv4.tcp_rmem = 4096 131072 6291456", nil},
		{"sysctl empty", "debian-6.1", nil, sysctlProbe("net.ipv4.ip_local_reserved_ports", ""), capability.Supported, "= (empty)", nil},
		{"ipvs sysctl absent, module not loaded", "debian-6.1", nil, sysctlProbe("net.ipv4.vs.conn_reuse_mode", "IP_VS"), capability.Unsupported, "(CONFIG_IP_VS=m)", nil},
		{"br_netfilter not loaded", "debian-6.1", nil, sysctlProbe("net.bridge.bridge-nf-call-iptables", "BRIDGE_NETFILTER"), capability.Unsupported, "absent: no ../testdata/hosts/debian-6.1/proc/sys/net/bridge/bridge-nf-call-iptables (CONFIG_BRIDGE_NETFILTER=m)", nil},
		{"ipvs sysctl present", "rhel-8.10", nil, sysctlProbe("net.ipv4.vs.conn_reuse_mode", "IP_VS"), capability.Supported, "= 1", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := testHost(t, tc.host)
			calls := *fakeHosts[tc.host]
			if tc.calls != nil {
				tc.calls(&calls)
			}
			h.Calls = &calls
			h.Load(t.Context())
			if tc.host2 != nil {
				tc.host2(t, h)
			}
			f := tc.probe(t.Context(), h)
			if f.Verdict != tc.verdict {
				t.Errorf("verdict %s, want %s (evidence %q)", f.Verdict, tc.verdict, f.Evidence)
			}
			mustContain(t, f.Evidence, tc.evidence)
		})
	}
}

func TestProbesWithoutMountTable(t *testing.T) {
	h := testHost(t, "debian-6.1")
	h.Load(t.Context())
	h.Mounts, h.MountsErr = nil, errors.New("read /proc/self/mountinfo: permission denied")
	for _, p := range []func(context.Context, *Host) capability.Finding{probeCgroupV2, probeCgroupControllers, probeCgroupV2Controllers, probeCgroupCPUStat, probeCgroupFreezer} {
		if f := p(t.Context(), h); f.Verdict != capability.Unknown || f.Evidence != h.MountsErr.Error() {
			t.Errorf("got %+v, want capability.Unknown with the mountinfo error", f)
		}
	}
}

func TestParseNftVersion(t *testing.T) {
	for in, want := range map[string]capability.Version{
		"nftables v1.0.6 (Lester Gooch #5)\n":      capability.V(1, 0, 6),
		"nftables v1.1.1 (Commodore Bullmoose #2)": capability.V(1, 1, 1),
		"nftables v0.9.3 (Topsy)":                  capability.V(0, 9, 3),
		"nftables v1.0 (x)":                        capability.V(1, 0, 0),
	} {
		got, err := ParseNftVersion(in)
		if err != nil || got != want {
			t.Errorf("ParseNftVersion(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseNftVersion("nftables"); err == nil {
		t.Error("no version: want an error")
	}
}

func FuzzParseNftVersion(f *testing.F) {
	for _, s := range []string{"nftables v1.0.6 (Lester Gooch #5)\n", "nftables v0.9.3 (Topsy)", "v1.0", "nftables", "v99999999999.1.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseNftVersion(s)
		if err != nil {
			return
		}
		if v.Major < 0 || v.Minor < 0 || v.Patch < 0 || v.Major > 1<<20 {
			t.Fatalf("ParseNftVersion(%q) = %v", s, v)
		}
	})
}
