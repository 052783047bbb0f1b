package kernel

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/kernel/capability"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// The tests in this file run the probes against the kernel of the machine
// they run on. What they expect is read from that machine through sources
// other than the code under test: uname(2), statfs(2) magic numbers,
// /proc/self/cgroup and /proc/cgroups, the kernel config file read and
// parsed here, and raw syscalls. So they hold on any kernel and cgroup
// layout, and each checks a probe against the machine.

func liveHost(t *testing.T) *Host {
	t.Helper()
	testutil.RequireRoot(t)
	h := DefaultHost()
	h.Load(t.Context())
	return h
}

// machine is what the tests know of this machine without the kernel
// package.
type machine struct {
	release string // uname -r
	version capability.Version
	suffix  string
	// config maps CONFIG_ names to values, as read here from the first of
	// /proc/config.gz, /boot/config-RELEASE, /lib/modules/RELEASE/config;
	// nil when none exists.
	config       map[string]string
	configSource string
	// v1 holds the controllers bound to a v1 hierarchy (/proc/self/cgroup).
	v1 map[string]bool
	// v2Visible: /proc/self/cgroup has the cgroup2 line, so cgroup2 is mounted.
	v2Visible bool
	// v2Free holds the controllers the kernel can offer on cgroup2: enabled
	// and on no v1 hierarchy (/proc/cgroups), named as cgroup2 names them.
	// nil when the kernel has no /proc/cgroups (CONFIG_CGROUP_V1=n).
	v2Free map[string]bool
}

// v2Capable maps the /proc/cgroups names of the controllers that cgroup v2
// has to their cgroup2 names; the others (cpuacct, devices, freezer,
// net_cls, net_prio, perf_event) exist in v1 only or are implicit in v2.
var v2Capable = map[string]string{
	"cpu": "cpu", "cpuset": "cpuset", "memory": "memory", "pids": "pids", "blkio": "io",
	"hugetlb": "hugetlb", "rdma": "rdma", "misc": "misc", "dmem": "dmem",
}

// canLoad reports whether the kernel has the module loaded or could load it:
// it is in /sys/module, or the machine has a module tree for its release
// (/lib/modules/RELEASE/modules.dep) for modprobe to find it in. A guest
// booted from an initramfs has no module tree.
func (m machine) canLoad(module string) bool {
	if _, err := os.Stat(filepath.Join("/sys/module", module)); err == nil {
		return true
	}
	_, err := os.Stat(filepath.Join("/lib/modules", m.release, "modules.dep"))
	return err == nil
}

var unameRE = regexp.MustCompile(`^(\d+)\.(\d+)(?:\.(\d+))?(.*)$`)

func readMachine(t *testing.T) machine {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	m := machine{release: unix.ByteSliceToString(u.Release[:]), v1: map[string]bool{}}
	sm := unameRE.FindStringSubmatch(m.release)
	if sm == nil {
		t.Fatalf("uname release %q has no version", m.release)
	}
	var v [3]int
	for i := range v {
		v[i], _ = strconv.Atoi(sm[i+1])
	}
	m.version, m.suffix = capability.V(v[0], v[1], v[2]), sm[4]

	for _, p := range []string{"/proc/config.gz", "/boot/config-" + m.release, "/lib/modules/" + m.release + "/config"} {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(p, ".gz") {
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			if b, err = io.ReadAll(zr); err != nil {
				t.Fatalf("%s: %v", p, err)
			}
		}
		m.config, m.configSource = map[string]string{}, p
		for _, line := range strings.Split(string(b), "\n") {
			if name, val, ok := strings.Cut(line, "="); ok && strings.HasPrefix(name, "CONFIG_") {
				m.config[name] = val
			}
		}
		break
	}

	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		id, rest, _ := strings.Cut(line, ":")
		ctrls, _, _ := strings.Cut(rest, ":")
		if id == "0" && ctrls == "" {
			m.v2Visible = true
			continue
		}
		for _, c := range strings.Split(ctrls, ",") {
			if c != "" && !strings.HasPrefix(c, "name=") {
				m.v1[c] = true
			}
		}
	}

	f, err := os.Open("/proc/cgroups")
	if errors.Is(err, os.ErrNotExist) {
		return m
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m.v2Free = map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 4 || strings.HasPrefix(fs[0], "#") {
			continue
		}
		if name, ok := v2Capable[fs[0]]; ok && fs[1] == "0" && fs[3] == "1" {
			m.v2Free[name] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

func statfsMagic(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatalf("statfs %s: %v", path, err)
	}
	return int64(st.Type)
}

// capSysResource reports whether CAP_SYS_RESOURCE is in this process's
// effective set (/proc/self/status CapEff).
func capSysResource(t *testing.T) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("CapEff %q: %v", v, err)
			}
			return caps&(1<<unix.CAP_SYS_RESOURCE) != 0
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return false
}

func TestLiveIdentity(t *testing.T) {
	h := liveHost(t)
	m := readMachine(t)
	if h.IdentityErr != nil {
		t.Fatal(h.IdentityErr)
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	id := h.Identity
	if id.Raw != m.release || id.Machine != unix.ByteSliceToString(u.Machine[:]) {
		t.Errorf("identity %+v does not match uname %q %q", id, m.release, u.Machine[:])
	}
	if id.Arch != runtime.GOARCH || id.OS != "linux" {
		t.Errorf("arch %q os %q, want %s linux", id.Arch, id.OS, runtime.GOARCH)
	}
	if id.Version != m.version || id.Suffix != m.suffix {
		t.Errorf("release %+v: want version %s and suffix %q from %q", id.Release, m.version, m.suffix, m.release)
	}
}

func TestLiveConfig(t *testing.T) {
	h := liveHost(t)
	m := readMachine(t)
	if m.config == nil {
		if !errors.Is(h.ConfigErr, ErrNoConfig) {
			t.Fatalf("no kernel config on this machine, yet config %+v, error %v; want ErrNoConfig", h.Config, h.ConfigErr)
		}
		return
	}
	if h.ConfigErr != nil {
		t.Fatal(h.ConfigErr)
	}
	if h.Config.Source != m.configSource {
		t.Errorf("config read from %s, want %s", h.Config.Source, m.configSource)
	}
	if len(m.config) == 0 || len(h.Config.Options) != len(m.config) {
		t.Errorf("%d options, want the %d set in %s", len(h.Config.Options), len(m.config), m.configSource)
	}
	for name, want := range m.config {
		if got, ok := h.Config.Value(name); !ok || got != want {
			t.Errorf("%s = %q (set %v), want %q", name, got, ok, want)
		}
	}
	if _, ok := h.Config.Value("NODESHIM_NO_SUCH_OPTION"); ok {
		t.Error("an option no kernel has is set")
	}
}

// TestLiveCgroupLayout checks the layout found in the mount table against
// the hierarchies the kernel lists for this process and the filesystem
// magic of each mount point.
func TestLiveCgroupLayout(t *testing.T) {
	h := liveHost(t)
	m := readMachine(t)
	if h.MountsErr != nil {
		t.Fatal(h.MountsErr)
	}
	l := CgroupLayoutOf(h.Mounts)
	want := capability.CgroupNone
	switch {
	case m.v2Visible && len(m.v1) == 0:
		want = capability.CgroupUnified
	case m.v2Visible:
		want = capability.CgroupHybrid
	case len(m.v1) > 0:
		want = capability.CgroupLegacy
	}
	if l.Mode != want {
		t.Fatalf("layout %+v, want mode %s (/proc/self/cgroup: cgroup2 %v, v1 %v)", l, want, m.v2Visible, m.v1)
	}
	if m.v2Visible {
		if got := statfsMagic(t, l.V2); got != unix.CGROUP2_SUPER_MAGIC {
			t.Errorf("cgroup2 at %s has magic %#x, want %#x", l.V2, got, unix.CGROUP2_SUPER_MAGIC)
		}
		if statfsMagic(t, cgroup.DefaultMountPoint) == unix.CGROUP2_SUPER_MAGIC && l.V2 != cgroup.DefaultMountPoint {
			t.Errorf("cgroup2 at %s, want %s where it is mounted", l.V2, cgroup.DefaultMountPoint)
		}
	}
	if len(l.V1) != len(m.v1) {
		t.Errorf("v1 controllers %v, want %v", v1Names(l), m.v1)
	}
	for c := range m.v1 {
		if l.V1[c] == "" {
			t.Errorf("v1 %s not found", c)
		} else if got := statfsMagic(t, l.V1[c]); got != unix.CGROUP_SUPER_MAGIC {
			t.Errorf("v1 %s at %s has magic %#x, want %#x", c, l.V1[c], got, unix.CGROUP_SUPER_MAGIC)
		}
	}
	if l.V2 == "" {
		return
	}
	cs, err := v2Controllers(l, h)
	if err != nil {
		t.Fatal(err)
	}
	if m.v2Free != nil {
		var want []string
		for c := range m.v2Free {
			want = append(want, c)
		}
		got := slices.Clone(cs)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("cgroup2 controllers %v, want %v (enabled and on no v1 hierarchy in /proc/cgroups)", cs, want)
		}
	}
}

// TestLiveCgroupProbes derives each cgroup probe's verdict from the
// machine's hierarchies as read by readMachine.
func TestLiveCgroupProbes(t *testing.T) {
	h := liveHost(t)
	m := readMachine(t)
	l := CgroupLayoutOf(h.Mounts)
	ctx := t.Context()

	f := probeCgroupV2(ctx, h)
	switch {
	case l.Mode == capability.CgroupUnified && l.V2 == cgroup.DefaultMountPoint:
		mustVerdict(t, "cgroup.v2", f, capability.Supported, "cgroup2 mounted at "+cgroup.DefaultMountPoint)
	case l.Mode == capability.CgroupNone:
		mustVerdict(t, "cgroup.v2", f, capability.Unsupported, "no cgroup")
	case l.Mode == capability.CgroupHybrid:
		mustVerdict(t, "cgroup.v2", f, capability.Degraded, "hybrid: cgroup2 at "+l.V2)
	default:
		mustVerdict(t, "cgroup.v2", f, capability.Degraded, "")
	}

	var v2 []string
	if l.V2 != "" {
		b, err := os.ReadFile(filepath.Join(l.V2, "cgroup.controllers"))
		if err != nil {
			t.Fatal(err)
		}
		v2 = strings.Fields(string(b))
	}
	kubelet := func(c string) bool { return m.v1[c] }
	if l.Mode == capability.CgroupUnified {
		kubelet = func(c string) bool { return slices.Contains(v2, c) }
	}
	f = probeCgroupControllers(ctx, h)
	switch {
	case !kubelet("cpu") || !kubelet("cpuset") || !kubelet("memory") || !kubelet("pids"):
		mustVerdict(t, "cgroup.controllers", f, capability.Unsupported, "missing ")
	case !kubelet("io") && !kubelet("blkio"):
		mustVerdict(t, "cgroup.controllers", f, capability.Degraded, "no io/blkio controller")
	default:
		mustVerdict(t, "cgroup.controllers", f, capability.Supported, "")
	}

	f = probeCgroupV2Controllers(ctx, h)
	switch {
	case l.V2 == "":
		mustVerdict(t, "cgroup.v2-controllers", f, capability.Unsupported, "no cgroup2 mount")
	case slices.Contains(v2, "cpu") && slices.Contains(v2, "io") && slices.Contains(v2, "memory") && slices.Contains(v2, "pids"):
		mustVerdict(t, "cgroup.v2-controllers", f, capability.Supported, "cgroup2 at "+l.V2+" offers ")
	default:
		mustVerdict(t, "cgroup.v2-controllers", f, capability.Unsupported, "cgroup2 at "+l.V2+" offers ")
	}

	f = probeCgroupCPUStat(ctx, h)
	if l.V2 == "" {
		mustVerdict(t, "cgroup.cpu-stat", f, capability.Unsupported, "no cgroup2 mount")
	} else if b, err := os.ReadFile(filepath.Join(l.V2, "cpu.stat")); err == nil {
		first, _, _ := strings.Cut(string(b), " ")
		mustVerdict(t, "cgroup.cpu-stat", f, capability.Supported, l.V2+"/cpu.stat: "+first+" ")
	} else {
		mustVerdict(t, "cgroup.cpu-stat", f, capability.Unsupported, "no cpu.stat")
	}
}

func mustVerdict(t *testing.T, id string, f capability.Finding, want capability.Verdict, evidence string) {
	t.Helper()
	if f.Verdict != want {
		t.Errorf("%s: verdict %s, want %s: %s", id, f.Verdict, want, f.Evidence)
	}
	mustContain(t, f.Evidence, evidence)
}

func TestLiveFreezer(t *testing.T) {
	h := liveHost(t)
	m := readMachine(t)
	l := CgroupLayoutOf(h.Mounts)
	v2ev := "no cgroup2 mount"
	if l.V2 != "" {
		// A child of the cgroup2 root carries cgroup.freeze (5.2+)
		// whatever controllers are enabled.
		dir := filepath.Join(l.V2, fmt.Sprintf("nodeshim-kernel-test-%d", os.Getpid()))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := os.Remove(dir); err != nil {
				t.Error(err)
			}
		})
		v2ev = "no cgroup.freeze in the children of " + l.V2
		if _, err := os.Stat(filepath.Join(dir, "cgroup.freeze")); err == nil {
			v2ev = "v2 freezer: " + l.V2 + "/"
		}
	}
	f := probeCgroupFreezer(t.Context(), h)
	switch {
	case l.Mode == capability.CgroupUnified && strings.HasPrefix(v2ev, "v2 freezer"):
		mustVerdict(t, "cgroup.freezer", f, capability.Supported, v2ev)
	case l.Mode == capability.CgroupUnified:
		mustVerdict(t, "cgroup.freezer", f, capability.Unsupported, v2ev)
	case m.v1["freezer"]:
		mustVerdict(t, "cgroup.freezer", f, capability.Degraded, fmt.Sprintf("v1 freezer at %s (used in %s mode); %s", l.V1["freezer"], l.Mode, v2ev))
	default:
		mustVerdict(t, "cgroup.freezer", f, capability.Unsupported, v2ev)
	}
}

// writeTrigger arms trigger on the pressure file at path as a PSI monitor
// does, and frees it again.
func writeTrigger(path, trigger string) error {
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Write(append([]byte(trigger), 0))
	return err
}

func TestLivePSI(t *testing.T) {
	h := liveHost(t)
	m := readMachine(t)
	l := CgroupLayoutOf(h.Mounts)
	f := probePSI(t.Context(), h)
	_, err := os.ReadFile("/proc/pressure/memory")
	if err != nil {
		mustVerdict(t, "psi.enabled", f, capability.Unsupported, "")
		mustVerdict(t, "psi.triggers", probePSITriggers(t.Context(), h), capability.Unsupported, "")
		return
	}
	cgroupPressure := ""
	if l.V2 != "" {
		if _, err := os.Stat(filepath.Join(l.V2, "memory.pressure")); err == nil {
			cgroupPressure = filepath.Join(l.V2, "memory.pressure")
		}
	}
	if cgroupPressure != "" {
		mustVerdict(t, "psi.enabled", f, capability.Supported, cgroupPressure+" present")
	} else {
		mustVerdict(t, "psi.enabled", f, capability.Degraded, "per-cgroup pressure")
	}
	if cmdline, err := os.ReadFile("/proc/cmdline"); err == nil && m.config["CONFIG_PSI_DEFAULT_DISABLED"] == "y" && slices.Contains(strings.Fields(string(cmdline)), "psi=1") {
		mustContain(t, f.Evidence, "CONFIG_PSI_DEFAULT_DISABLED=y, enabled by psi=1")
	}

	// Linux 6.5+ takes from a writer without CAP_SYS_RESOURCE only windows
	// that are multiples of 2 s; with it, the 1 s window of psi.rst.
	privileged := capSysResource(t)
	unprivOnly := !privileged && m.version.AtLeast(capability.V(6, 5, 0))
	files := []string{"/proc/pressure/memory"}
	if cgroupPressure != "" {
		files = append(files, cgroupPressure)
	}
	var first, second error
	for i, p := range files {
		err1, err2 := writeTrigger(p, psiTrigger), writeTrigger(p, psiTriggerUnpriv2s)
		if privileged && err1 != nil {
			t.Errorf("%s %q with CAP_SYS_RESOURCE: %v", p, psiTrigger, err1)
		}
		if unprivOnly && (!errors.Is(err1, syscall.EINVAL) || err2 != nil) {
			t.Errorf("%s on %s without CAP_SYS_RESOURCE: %q: %v, %q: %v; want EINVAL, then armed", p, m.version, psiTrigger, err1, psiTriggerUnpriv2s, err2)
		}
		if i == 0 {
			first, second = err1, err2
		}
	}
	f = probePSITriggers(t.Context(), h)
	switch {
	case first == nil:
		mustVerdict(t, "psi.triggers", f, capability.Supported, "trigger armed")
	case errors.Is(first, syscall.EINVAL) && second == nil:
		mustVerdict(t, "psi.triggers", f, capability.Degraded, `EINVAL (invalid argument); "some 100000 2000000" armed`)
	default:
		mustVerdict(t, "psi.triggers", f, capability.Unsupported, "")
	}

	// A Host pointed at plain files never gets written to.
	var live LiveCalls
	plain := filepath.Join(t.TempDir(), "memory")
	writeFile(t, plain, "some avg10=0.00\n")
	if err := live.WritePSITrigger(plain, psiTrigger); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("plain file: %v, want ErrUnsupported", err)
	}
	if b, _ := os.ReadFile(plain); string(b) != "some avg10=0.00\n" {
		t.Errorf("plain file changed: %q", b)
	}
}

// TestLiveSyscallProbes asks the kernel directly, with raw syscalls here,
// and holds each probe to the answer.
func TestLiveSyscallProbes(t *testing.T) {
	h := liveHost(t)
	m := readMachine(t)
	probe := func(id string) capability.Finding { return catalogueEntry(t, id).Probe(t.Context(), h) }

	// mount_setattr(2), 5.12+: fd -1 is EBADF where the call exists.
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
	setattr := unix.MountSetattr(-1, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr)
	switch {
	case errors.Is(setattr, syscall.EBADF):
		mustVerdict(t, "mounts.mount-setattr", probe("mounts.mount-setattr"), capability.Supported, "EBADF")
		// procfs can never be idmapped.
		if err := idmapMount("proc"); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("idmapped proc: %v, want EINVAL", err)
		}
	case errors.Is(setattr, syscall.ENOSYS):
		mustVerdict(t, "mounts.mount-setattr", probe("mounts.mount-setattr"), capability.Unsupported, "ENOSYS")
	default:
		t.Errorf("mount_setattr(-1): %v, want EBADF or ENOSYS", setattr)
	}

	// fsconfig(2) on a tmpfs context: noswap is known since 6.4, an
	// invented flag never.
	noswap := func() error {
		fd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.FsconfigSetFlag(fd, "noswap")
	}()
	switch {
	case noswap == nil:
		mustVerdict(t, "swap.tmpfs-noswap", probe("swap.tmpfs-noswap"), capability.Supported, "accepted")
	case errors.Is(noswap, syscall.EINVAL):
		mustVerdict(t, "swap.tmpfs-noswap", probe("swap.tmpfs-noswap"), capability.Unsupported, "tmpfs does not know noswap")
	default:
		mustVerdict(t, "swap.tmpfs-noswap", probe("swap.tmpfs-noswap"), capability.Unknown, "")
	}
	if !errors.Is(noswap, syscall.ENOSYS) {
		var live LiveCalls
		if err := live.TmpfsFlag("nodeshim-no-such-option"); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("unknown tmpfs option: %v, want EINVAL", err)
		}
	}

	// Linux 6.3 made tmpfs idmappable (FS_ALLOW_IDMAP).
	if m.version.AtLeast(capability.V(6, 3, 0)) {
		mustVerdict(t, "userns.idmap-tmpfs", probe("userns.idmap-tmpfs"), capability.Supported, "MOUNT_ATTR_IDMAP set on a detached tmpfs mount")
	} else {
		mustVerdict(t, "userns.idmap-tmpfs", probe("userns.idmap-tmpfs"), capability.Unsupported, "")
	}

	// The kernel config and the sysctls say whether nf_tables and user
	// namespaces are there.
	if m.config != nil {
		switch v := m.config["CONFIG_NF_TABLES"]; {
		case v == "y" || v == "m" && m.canLoad("nf_tables"):
			mustVerdict(t, "nftables.kernel", probe("nftables.kernel"), capability.Supported, "nf_tables answered NFT_MSG_GETGEN")
		case v == "m":
			mustVerdict(t, "nftables.kernel", probe("nftables.kernel"), capability.Unsupported, "(CONFIG_NF_TABLES=m)")
		default:
			mustVerdict(t, "nftables.kernel", probe("nftables.kernel"), capability.Unsupported, "")
		}
		maxNS, _ := os.ReadFile("/proc/sys/user/max_user_namespaces")
		if m.config["CONFIG_USER_NS"] == "y" && strings.TrimSpace(string(maxNS)) != "0" {
			mustVerdict(t, "userns.create", probe("userns.create"), capability.Supported, "clone(CLONE_NEWUSER) succeeded")
		} else {
			mustVerdict(t, "userns.create", probe("userns.create"), capability.Unsupported, "")
		}
	}

	fsys, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case regexp.MustCompile(`(?m)\soverlay$`).Match(fsys):
		mustVerdict(t, "mounts.overlayfs", probe("mounts.overlayfs"), capability.Supported, "overlay registered in /proc/filesystems")
	case m.config != nil && m.config["CONFIG_OVERLAY_FS"] == "m":
		// The probe reads the config and does not load the module.
		mustVerdict(t, "mounts.overlayfs", probe("mounts.overlayfs"), capability.Supported, "CONFIG_OVERLAY_FS=m")
	default:
		mustVerdict(t, "mounts.overlayfs", probe("mounts.overlayfs"), capability.Unsupported, "")
	}
}

// TestLiveNft runs the host's nft, if any, and holds the probe to its
// version: kube-proxy's nftables mode wants 1.0.1.
func TestLiveNft(t *testing.T) {
	h := liveHost(t)
	f := catalogueEntry(t, "nftables.nft").Probe(t.Context(), h)
	path, err := exec.LookPath("nft")
	if err != nil {
		mustVerdict(t, "nftables.nft", f, capability.Supported, "nft not installed")
		return
	}
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v: %s", path, err, out)
	}
	sm := regexp.MustCompile(`v(\d+)\.(\d+)(?:\.(\d+))?`).FindStringSubmatch(string(out))
	if sm == nil {
		t.Fatalf("no version in %q", out)
	}
	var v [3]int
	for i := range v {
		v[i], _ = strconv.Atoi(sm[i+1])
	}
	if capability.V(v[0], v[1], v[2]).AtLeast(capability.V(1, 0, 1)) {
		mustVerdict(t, "nftables.nft", f, capability.Supported, strings.TrimSpace(string(out)))
	} else {
		mustVerdict(t, "nftables.nft", f, capability.Unsupported, "older than")
	}
}

// TestLiveReport collects the whole catalogue on this machine: no probe
// may be capability.Unknown here, the kernel section is this machine's, and every
// sysctl probe agrees with /proc/sys.
func TestLiveReport(t *testing.T) {
	h := liveHost(t)
	m := readMachine(t)
	rep, err := capability.Collector{}.Collect(t.Context(), h, Catalogue())
	if err != nil {
		t.Fatal(err)
	}
	// The freezer probe looks at the children of the cgroup2 root; a
	// machine whose init puts nothing below the root (a guest booted from
	// an initramfs) has none to look at.
	childless := false
	if l := CgroupLayoutOf(h.Mounts); l.V2 != "" {
		ents, err := os.ReadDir(l.V2)
		if err != nil {
			t.Fatal(err)
		}
		childless = !slices.ContainsFunc(ents, os.DirEntry.IsDir)
	}
	for _, r := range rep.Requirements {
		if r.Verdict == capability.Unknown && (r.ID != "cgroup.freezer" || !childless) {
			t.Errorf("%s is Unknown: %s", r.ID, r.Evidence)
		}
		// The kernel is new enough, yet the probe finds the feature off.
		if (r.VersionVerdict == capability.Supported && r.Verdict == capability.Unsupported) != (r.Mismatch == capability.Disabled) {
			t.Errorf("%s: by version %s, by probe %s, mismatch %q", r.ID, r.VersionVerdict, r.Verdict, r.Mismatch)
		}
		name, ok := strings.CutPrefix(r.ID, "sysctl.")
		if !ok {
			continue
		}
		p := "/proc/sys/" + strings.ReplaceAll(name, ".", "/")
		if _, err := os.Stat(p); err == nil && r.Verdict != capability.Supported {
			t.Errorf("%s: %s although %s exists (%s)", r.ID, r.Verdict, p, r.Evidence)
		} else if errors.Is(err, os.ErrNotExist) && r.Verdict != capability.Unsupported {
			t.Errorf("%s: %s although there is no %s (%s)", r.ID, r.Verdict, p, r.Evidence)
		}
	}
	if rep.Kernel.Cgroup.Mode != CgroupLayoutOf(h.Mounts).Mode || rep.Kernel.Release.Raw != m.release {
		t.Errorf("kernel section %+v", rep.Kernel)
	}
	if m.config != nil && rep.Kernel.Config.Source != m.configSource {
		t.Errorf("kernel config from %q, want %s", rep.Kernel.Config.Source, m.configSource)
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
