package kernel

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/nodeshim/nodeshim/internal/testutil"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"golang.org/x/sys/unix"
)

// The tests in this file run the probes against the kernel of the machine
// they run on and assert what is true of nodeshim's build and test nodes
// (kernel 6.18 with /proc/config.gz, hybrid cgroups with cgroup2 at
// /sys/fs/cgroup/unified holding only hugetlb, PSI on through psi=1, root
// without CAP_SYS_RESOURCE).

func liveHost(t *testing.T) *Host {
	t.Helper()
	testutil.RequireRoot(t)
	h := DefaultHost()
	h.Load(t.Context())
	return h
}

func TestLiveIdentity(t *testing.T) {
	h := liveHost(t)
	if h.IdentityErr != nil {
		t.Fatal(h.IdentityErr)
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	id := h.Identity
	if id.Raw != unix.ByteSliceToString(u.Release[:]) || id.Machine != unix.ByteSliceToString(u.Machine[:]) {
		t.Errorf("identity %+v does not match uname %q %q", id, u.Release[:], u.Machine[:])
	}
	if id.Arch != runtime.GOARCH || id.OS != "linux" {
		t.Errorf("arch %q os %q, want %s linux", id.Arch, id.OS, runtime.GOARCH)
	}
	if !id.Version.AtLeast(capability.V(6, 18, 0)) || !strings.HasPrefix(id.Raw, id.Version.String()) || id.Suffix == "" {
		t.Errorf("release %+v: want 6.18+ with a distribution suffix", id.Release)
	}
}

func TestLiveConfig(t *testing.T) {
	h := liveHost(t)
	testutil.RequireFile(t, "/proc/config.gz")
	if h.ConfigErr != nil {
		t.Fatal(h.ConfigErr)
	}
	if h.Config.Source != "/proc/config.gz" {
		t.Errorf("config read from %s, want /proc/config.gz", h.Config.Source)
	}
	for opt, want := range map[string]Tristate{"IKCONFIG_PROC": Yes, "PSI": Yes, "PSI_DEFAULT_DISABLED": Yes, "BPF_SYSCALL": Yes, "SECCOMP_FILTER": Yes, "CHECKPOINT_RESTORE": Yes, "IP_VS": Unset} {
		if got := h.Config.Get(opt); got != want {
			t.Errorf("CONFIG_%s = %s, want %s", opt, got, want)
		}
	}
}

func TestLiveCgroups(t *testing.T) {
	h := liveHost(t)
	if h.MountsErr != nil {
		t.Fatal(h.MountsErr)
	}
	l := CgroupLayoutOf(h.Mounts)
	if l.Mode != capability.CgroupHybrid || l.V2 != "/sys/fs/cgroup/unified" {
		t.Fatalf("layout %+v, want hybrid with cgroup2 at /sys/fs/cgroup/unified", l)
	}
	for _, c := range []string{"cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids"} {
		if l.V1[c] != "/sys/fs/cgroup/"+c {
			t.Errorf("v1 %s at %q", c, l.V1[c])
		}
	}
	cs, err := v2Controllers(l, h)
	if err != nil || strings.Join(cs, " ") != "hugetlb" {
		t.Errorf("cgroup2 controllers %v, %v; want only hugetlb", cs, err)
	}
	ctx := t.Context()
	for _, tc := range []struct {
		probe    func(*Host) capability.Finding
		verdict  capability.Verdict
		evidence string
	}{
		{func(h *Host) capability.Finding { return probeCgroupV2(ctx, h) }, capability.Degraded, "hybrid: cgroup2 at /sys/fs/cgroup/unified"},
		{func(h *Host) capability.Finding { return probeCgroupControllers(ctx, h) }, capability.Supported, "v2 (unused by the kubelet): hugetlb"},
		{func(h *Host) capability.Finding { return probeCgroupV2Controllers(ctx, h) }, capability.Unsupported, "offers hugetlb; missing cpu io memory pids"},
		{func(h *Host) capability.Finding { return probeCgroupCPUStat(ctx, h) }, capability.Supported, "/sys/fs/cgroup/unified/cpu.stat: usage_usec "},
	} {
		f := tc.probe(h)
		if f.Verdict != tc.verdict {
			t.Errorf("verdict %s, want %s: %s", f.Verdict, tc.verdict, f.Evidence)
		}
		mustContain(t, f.Evidence, tc.evidence)
	}
}

func TestLiveFreezer(t *testing.T) {
	h := liveHost(t)
	// A child of the cgroup2 root carries cgroup.freeze (5.2+) whatever
	// controllers are enabled.
	dir := filepath.Join("/sys/fs/cgroup/unified", fmt.Sprintf("nodeshim-kernel-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Error(err)
		}
	})
	f := probeCgroupFreezer(t.Context(), h)
	if f.Verdict != capability.Degraded {
		t.Errorf("verdict %s: %s", f.Verdict, f.Evidence)
	}
	mustContain(t, f.Evidence, "v1 freezer at /sys/fs/cgroup/freezer (used in hybrid mode); v2 freezer: /sys/fs/cgroup/unified/")
}

func TestLivePSI(t *testing.T) {
	h := liveHost(t)
	testutil.RequireFile(t, "/proc/pressure/memory")
	f := probePSI(t.Context(), h)
	if f.Verdict != capability.Supported {
		t.Errorf("psi.enabled %s: %s", f.Verdict, f.Evidence)
	}
	mustContain(t, f.Evidence, "CONFIG_PSI_DEFAULT_DISABLED=y, enabled by psi=1; /sys/fs/cgroup/unified/memory.pressure present")

	// Without CAP_SYS_RESOURCE, 6.5+ accepts only windows that are
	// multiples of 2 s: the 1 s window of psi.rst is EINVAL here.
	var live LiveCalls
	for _, p := range []string{"/proc/pressure/memory", "/sys/fs/cgroup/unified/memory.pressure"} {
		if err := live.WritePSITrigger(p, psiTrigger); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%s %q: %v, want EINVAL", p, psiTrigger, err)
		}
		if err := live.WritePSITrigger(p, psiTriggerUnpriv2s); err != nil {
			t.Errorf("%s %q: %v, want it armed", p, psiTriggerUnpriv2s, err)
		}
	}
	f = probePSITriggers(t.Context(), h)
	if f.Verdict != capability.Degraded {
		t.Errorf("psi.triggers %s: %s", f.Verdict, f.Evidence)
	}
	mustContain(t, f.Evidence, `EINVAL (invalid argument); "some 150000 2000000" armed`)

	// A Host pointed at plain files never gets written to.
	plain := filepath.Join(t.TempDir(), "memory")
	writeFile(t, plain, "some avg10=0.00\n")
	if err := live.WritePSITrigger(plain, psiTrigger); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("plain file: %v, want ErrUnsupported", err)
	}
	if b, _ := os.ReadFile(plain); string(b) != "some avg10=0.00\n" {
		t.Errorf("plain file changed: %q", b)
	}
}

func TestLiveSyscallProbes(t *testing.T) {
	h := liveHost(t)
	var live LiveCalls
	if err := live.MountSetattr(); !errors.Is(err, syscall.EBADF) {
		t.Errorf("mount_setattr: %v, want EBADF", err)
	}
	if err := live.TmpfsFlag("noswap"); err != nil {
		t.Errorf("tmpfs noswap on 6.18: %v", err)
	}
	if err := live.TmpfsFlag("nodeshim-no-such-option"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("unknown tmpfs option: %v, want EINVAL", err)
	}
	if _, err := live.NetfilterGeneration(t.Context()); err != nil {
		t.Errorf("NFT_MSG_GETGEN: %v", err)
	}
	if err := live.NewUserNamespace(); err != nil {
		t.Errorf("user namespace: %v", err)
	}
	// tmpfs can be idmapped since 6.3; procfs never.
	if err := live.IdmapTmpfs(); err != nil {
		t.Errorf("idmapped tmpfs: %v", err)
	}
	if err := idmapMount("proc"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("idmapped proc: %v, want EINVAL", err)
	}
	for _, tc := range []struct {
		id       string
		evidence string
	}{
		{"mounts.mount-setattr", "EBADF"},
		{"swap.tmpfs-noswap", "accepted"},
		{"nftables.kernel", "nf_tables answered NFT_MSG_GETGEN"},
		{"userns.create", "clone(CLONE_NEWUSER) succeeded"},
		{"userns.idmap-tmpfs", "MOUNT_ATTR_IDMAP set on a detached tmpfs mount"},
		{"mounts.overlayfs", "overlay registered in /proc/filesystems"},
	} {
		r := catalogueEntry(t, tc.id)
		f := r.Probe(t.Context(), h)
		if f.Verdict != capability.Supported {
			t.Errorf("%s: %s: %s", tc.id, f.Verdict, f.Evidence)
		}
		mustContain(t, f.Evidence, tc.evidence)
	}
}

func TestLiveNft(t *testing.T) {
	h := liveHost(t)
	testutil.RequireBinary(t, "nft")
	f := catalogueEntry(t, "nftables.nft").Probe(t.Context(), h)
	if f.Verdict != capability.Supported || !strings.HasPrefix(f.Evidence, "nftables v1.") {
		t.Errorf("nft: %s: %s", f.Verdict, f.Evidence)
	}
}

// TestLiveReport collects the whole catalogue on this machine: no probe
// may be Unknown here, and the known facts show.
func TestLiveReport(t *testing.T) {
	h := liveHost(t)
	rep, err := capability.Collect(t.Context(), h, Catalogue())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Requirements {
		if r.Verdict == capability.Unknown {
			t.Errorf("%s is Unknown: %s", r.ID, r.Evidence)
		}
	}
	want := map[string]capability.Verdict{
		"cgroup.v2": capability.Degraded, "cgroup.v2-controllers": capability.Unsupported, "psi.enabled": capability.Supported,
		"psi.triggers": capability.Degraded, "mounts.mount-setattr": capability.Supported, "swap.tmpfs-noswap": capability.Supported,
		"nftables.kernel": capability.Supported, "sysctl.net.ipv4.tcp_syncookies": capability.Supported,
		"sysctl.net.ipv4.vs.conn_reuse_mode": capability.Unsupported, "sysctl.net.bridge.bridge-nf-call-iptables": capability.Supported,
	}
	for id, v := range want {
		if r, _ := rep.Result(id); r.Verdict != v {
			t.Errorf("%s: %s, want %s (%s)", id, r.Verdict, v, r.Evidence)
		}
	}
	// CONFIG_IP_VS is off in this kernel although 6.18 is new enough.
	if r, _ := rep.Result("sysctl.net.ipv4.vs.conn_reuse_mode"); r.Mismatch != capability.Disabled {
		t.Errorf("conn_reuse_mode: mismatch %q, want disabled", r.Mismatch)
	}
	if rep.Kernel.Cgroup.Mode != capability.CgroupHybrid || rep.Kernel.Config.Source != "/proc/config.gz" {
		t.Errorf("kernel section %+v", rep.Kernel)
	}
	if s := ReadSysctl("/proc", "net.ipv4.tcp_syncookies"); s.State != capability.SysctlPresent || s.Value == "" {
		t.Errorf("tcp_syncookies %+v", s)
	}
}

func catalogueEntry(t *testing.T, id string) capability.Requirement {
	t.Helper()
	for _, r := range Catalogue() {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("no requirement %s", id)
	return capability.Requirement{}
}
