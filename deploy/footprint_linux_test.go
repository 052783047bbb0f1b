package deploy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/shim/config"
	"github.com/nodeshim/nodeshim/testenv/kubetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

var (
	footprintWarmup   = flag.Duration("footprint.warmup", 10*time.Second, "BenchmarkFootprint: time after start before the idle window")
	footprintIdle     = flag.Duration("footprint.idle", 30*time.Second, "BenchmarkFootprint: idle window")
	footprintPressure = flag.Duration("footprint.pressure", 20*time.Second, "BenchmarkFootprint: pressure episode window")
	footprintPods     = flag.Int("footprint.pods", 1000, "BenchmarkFootprint: pod cgroups in the kubepods tree")
	footprintBaseline = flag.String("footprint.baseline", "", "BenchmarkFootprint: a nodeshim binary to measure side by side (serve-base and its `nodeshim reporter`, reporter-base), e.g. main's")
)

// Targets of the issue.
const (
	targetShimRSSMiB        = 30
	targetShimIdleCPUPct    = 0.5
	targetReporterRSSMiB    = 20
	targetReporterWritesPer = 1 // API writes per 10 s when nothing changes
)

// unifiedRoot is the cgroup2 mount of this machine's hybrid hierarchy; on a
// pure cgroup2 machine it is /sys/fs/cgroup.
func unifiedRoot() string {
	if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.procs"); err == nil {
		return "/sys/fs/cgroup/unified"
	}
	return "/sys/fs/cgroup"
}

// procSample is one reading of a process's memory and CPU time.
type procSample struct {
	rssKiB, hwmKiB uint64
	anonKiB        uint64 // RssAnon: heap, stacks, the Go runtime's own
	fileKiB        uint64 // RssFile: the binary's mapped page cache, clean and shared
	cpuTicks       uint64 // utime+stime of every thread, dead or alive, in USER_HZ
	// The process's own memory cgroup, when it has one: what the kernel
	// charged to it, and the working set as kubelet computes it (usage
	// minus inactive file pages), which is what limits and evictions see.
	memcgUsageKiB, memcgWSKiB, memcgAnonKiB uint64
}

// v1Memory is the v1 memory hierarchy of a hybrid node.
const v1Memory = "/sys/fs/cgroup/memory"

func readMemcg(dir string, s *procSample) error {
	u, err := os.ReadFile(filepath.Join(dir, "memory.usage_in_bytes"))
	if err != nil {
		return err
	}
	usage, err := strconv.ParseUint(strings.TrimSpace(string(u)), 10, 64)
	if err != nil {
		return fmt.Errorf("parse %s/memory.usage_in_bytes: %w", dir, err)
	}
	st, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return err
	}
	var inactiveFile, rss uint64
	for _, l := range strings.Split(string(st), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		switch f[0] {
		case "total_inactive_file":
			inactiveFile, _ = strconv.ParseUint(f[1], 10, 64)
		case "total_rss":
			rss, _ = strconv.ParseUint(f[1], 10, 64)
		}
	}
	s.memcgUsageKiB = usage / 1024
	if usage > inactiveFile {
		s.memcgWSKiB = (usage - inactiveFile) / 1024
	}
	s.memcgAnonKiB = rss / 1024
	return nil
}

// userHZ is the unit of /proc/PID/stat's utime and stime: fixed at 100 by
// the kernel's ABI on x86 (USER_HZ), whatever CONFIG_HZ is.
const userHZ = 100

func readProc(pid int) (procSample, error) {
	var s procSample
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for _, l := range strings.Split(string(status), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			s.rssKiB, _ = strconv.ParseUint(f[1], 10, 64)
		case "VmHWM:":
			s.hwmKiB, _ = strconv.ParseUint(f[1], 10, 64)
		case "RssAnon:":
			s.anonKiB, _ = strconv.ParseUint(f[1], 10, 64)
		case "RssFile:":
			s.fileKiB, _ = strconv.ParseUint(f[1], 10, 64)
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// comm may hold spaces and parentheses: fields start after the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return s, fmt.Errorf("parse /proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return s, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	// After comm: state(3) ... utime(14) stime(15), so indexes 11 and 12 here.
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return s, fmt.Errorf("parse /proc/%d/stat utime/stime: %v %v", pid, err1, err2)
	}
	s.cpuTicks = ut + st
	return s, nil
}

// window summarises the samples of one phase.
type window struct {
	meanRSSMiB, maxRSSMiB float64
	meanAnonMiB           float64
	meanFileMiB           float64
	meanWSMiB, maxWSMiB   float64 // memory cgroup working set
	cpuPct                float64 // of one core
	cpuMs                 float64
}

type measured struct {
	name    string
	pid     int
	memcg   string
	mu      sync.Mutex
	samples []procSample
	err     error
}

func (m *measured) sample() {
	s, err := readProc(m.pid)
	if err == nil && m.memcg != "" {
		err = readMemcg(m.memcg, &s)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		if m.err == nil {
			m.err = fmt.Errorf("%s (pid %d): %w", m.name, m.pid, err)
		}
		return
	}
	m.samples = append(m.samples, s)
}

// mark returns the index of the next sample, the start of a phase.
func (m *measured) mark() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.samples)
}

func (m *measured) window(from, to int, d time.Duration) window {
	m.mu.Lock()
	defer m.mu.Unlock()
	ss := m.samples[from:to]
	var w window
	if len(ss) < 2 {
		return w
	}
	var sum, anon, file, ws float64
	for _, s := range ss {
		ws += float64(s.memcgWSKiB) / 1024
		w.maxWSMiB = max(w.maxWSMiB, float64(s.memcgWSKiB)/1024)
		mib := float64(s.rssKiB) / 1024
		sum += mib
		anon += float64(s.anonKiB) / 1024
		file += float64(s.fileKiB) / 1024
		w.maxRSSMiB = max(w.maxRSSMiB, mib)
	}
	n := float64(len(ss))
	w.meanRSSMiB, w.meanAnonMiB, w.meanFileMiB, w.meanWSMiB = sum/n, anon/n, file/n, ws/n
	ticks := ss[len(ss)-1].cpuTicks - ss[0].cpuTicks
	w.cpuMs = float64(ticks) * 1000 / userHZ
	w.cpuPct = w.cpuMs / float64(d.Milliseconds()) * 100
	return w
}

// podTree creates a kubepods.slice tree of n pods (systemd driver names,
// a third each Guaranteed, Burstable and BestEffort), one container scope
// per pod, under parent; it returns one container cgroup to run load in.
func podTree(b *testing.B, parent string, n int) string {
	b.Helper()
	kp := filepath.Join(parent, "kubepods.slice")
	qos := map[string]string{
		"guaranteed": kp,
		"burstable":  filepath.Join(kp, "kubepods-burstable.slice"),
		"besteffort": filepath.Join(kp, "kubepods-besteffort.slice"),
	}
	for _, d := range qos {
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	var first string
	for i := range n {
		var id [16]byte
		if _, err := rand.Read(id[:]); err != nil {
			b.Fatal(err)
		}
		h := hex.EncodeToString(id[:])
		uid := strings.Join([]string{h[:8], h[8:12], h[12:16], h[16:20], h[20:]}, "_")
		var pod string
		switch i % 3 {
		case 0:
			pod = filepath.Join(qos["guaranteed"], "kubepods-pod"+uid+".slice")
		case 1:
			pod = filepath.Join(qos["burstable"], "kubepods-burstable-pod"+uid+".slice")
		default:
			pod = filepath.Join(qos["besteffort"], "kubepods-besteffort-pod"+uid+".slice")
		}
		ctr := filepath.Join(pod, "cri-containerd-"+h+h+".scope")
		if err := os.MkdirAll(ctr, 0o755); err != nil {
			b.Fatal(err)
		}
		if first == "" {
			first = ctr
		}
	}
	return first
}

// removeTree removes a cgroup tree, deepest directories first.
func removeTree(root string) error {
	var dirs []string
	if err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	}); err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil {
			return err
		}
	}
	return nil
}

// removeCgroup removes an empty cgroup directory. A killed process leaves
// its cgroup asynchronously: rmdir answers EBUSY until it has.
func removeCgroup(b *testing.B, dir string) {
	var err error
	for range 50 {
		if err = os.Remove(dir); err == nil || os.IsNotExist(err) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.Errorf("remove %s: %v", dir, err)
}

// startIn starts argv with its cgroup2 cgroup set to cg at clone time
// (CLONE_INTO_CGROUP) and, through unshare(1), in a new cgroup and mount
// namespace where cg is the root of a fresh cgroup2 mount at the usual
// place: the process sees the benchmark's kubepods tree as the node's,
// and nothing of the rest of this machine's cgroups.
//
// With memcg set (a v1 memory cgroup of a hybrid hierarchy), the process
// joins it before unshare runs, so that every page it charges is counted
// there from its first allocation.
func startIn(b *testing.B, cg, memcg string, out io.Writer, argv ...string) *exec.Cmd {
	b.Helper()
	fd, err := os.Open(cg)
	if err != nil {
		b.Fatal(err)
	}
	defer fd.Close()
	mnt := unifiedRoot()
	script := fmt.Sprintf(`umount %[1]s && mount -t cgroup2 cgroup2 %[1]s && exec "$@"`, mnt)
	args := append([]string{"--cgroup", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh"}, argv...)
	cmd := exec.Command("unshare", args...)
	if memcg != "" {
		cmd = exec.Command("sh", append([]string{"-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, memcg, "unshare"}, args...)...)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd())}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start %v: %v", argv, err)
	}
	return cmd
}

// startLoad starts sh -c script in cgroup2 cgroup cg (no new namespaces).
func startLoad(b *testing.B, cg, script string) *exec.Cmd {
	b.Helper()
	fd, err := os.Open(cg)
	if err != nil {
		b.Fatal(err)
	}
	defer fd.Close()
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd()), Setpgid: true}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	return cmd
}

func stop(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	if cmd.SysProcAttr != nil && cmd.SysProcAttr.Setpgid {
		_ = syscall.Kill(-cmd.Process.Pid, sig) // the shell's loop and its children
	} else {
		_ = cmd.Process.Signal(sig)
	}
	_ = cmd.Wait()
}

// psiTotal returns the "some" total (µs) of a PSI file.
func psiTotal(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 5 && f[0] == "some" {
			return strconv.ParseUint(strings.TrimPrefix(f[4], "total="), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no some line", path)
}

// shimConfigDir writes the deploy ConfigMap's documents to a directory, the
// configuration source serve reads in the DaemonSet.
func shimConfigDir(b *testing.B) string {
	b.Helper()
	objs, err := Objects()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	for _, o := range objs {
		if cm, ok := o.Object.(*corev1.ConfigMap); ok {
			for k, v := range cm.Data {
				if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, config.BaseFile)); err != nil {
		b.Fatal(err)
	}
	return dir
}

// BenchmarkFootprint runs the real `nodeshim serve` (built with the
// Dockerfile's static build command, configured by deploy's ConfigMap) on a
// node with -footprint.pods pod cgroups, with the real reporter (the
// image's nodeshim-reporter, built with the Dockerfile's command) long
// polling it and publishing to a real kube-apiserver
// (testenv/kubetest) as deploy/'s ServiceAccount, beside `nodeshim
// pressure --watch` (the cgroup and PSI monitor, which polls kubepods' PSI
// totals here since triggers are refused) and, as the floor, a Go program
// that only waits for a signal. All four run at once in a cgroup namespace
// whose root is the benchmark's kubepods tree, each in its own memory
// cgroup. It samples VmRSS and the memory cgroup every second and
// utime+stime at each phase's edges: a warm-up, an idle window during which
// a scraper reads the reporter's /metrics (which relays the shim's) every
// 30 s, and a pressure episode (two CPU-bound loops and a thrasher faulting
// random pages of a 256 MiB file under a 64 MiB memory limit, in a pod's
// cgroup; the kubepods PSI totals prove it happened). The reporter's API
// writes are read from its own counters. With -footprint.baseline, another
// build's `serve` and `reporter` (main's, say) run beside them, measured
// the same way.
// Run it with `make bench-footprint`; results go to BENCHMARKS.md (footprint).
func BenchmarkFootprint(b *testing.B) {
	testutil.RequireRoot(b)
	testutil.RequireBinary(b, "unshare")
	b.ReportAllocs()
	unified := unifiedRoot()
	if data, err := os.ReadFile("/proc/self/cgroup"); err != nil || !strings.Contains(string(data), "0::/") {
		testutil.Skip(b, "no cgroup2 hierarchy in /proc/self/cgroup: %v", err)
	}

	// Binaries: the image's nodeshim and the baseline.
	env, args, err := dockerBuild("../Dockerfile", map[string]string{"VERSION": "footprint", "COMMIT": "bench"})
	if err != nil {
		b.Fatal(err)
	}
	work := b.TempDir()
	bin := filepath.Join(work, "nodeshim")
	for i, a := range args {
		if a == "-o" && i+1 < len(args) {
			args[i+1] = bin
		}
	}
	build := exec.Command("go", append([]string{"build"}, args...)...)
	build.Dir, build.Env = "..", append(os.Environ(), env...)
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build nodeshim: %v\n%s", err, out)
	}
	reporterBin := buildReporter(b, "footprint", "bench")
	baseSrc := filepath.Join(work, "baseline.go")
	if err := os.WriteFile(baseSrc, []byte(`package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, os.Interrupt)
	<-c
}
`), 0o644); err != nil {
		b.Fatal(err)
	}
	baseBin := filepath.Join(work, "baseline")
	bb := exec.Command("go", "build", "-trimpath", "-o", baseBin, baseSrc)
	bb.Dir = work
	bb.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off")
	if out, err := bb.CombinedOutput(); err != nil {
		b.Fatalf("build baseline: %v\n%s", err, out)
	}

	// Every process runs a copy written as an image's layer is unpacked,
	// not the linker's output file (see testutil.InstallAsImage).
	image := filepath.Join(work, "image")
	bin = testutil.InstallAsImage(b, bin, image)
	reporterBin = testutil.InstallAsImage(b, reporterBin, image)
	baseBin = testutil.InstallAsImage(b, baseBin, image)
	baseNodeshim := *footprintBaseline
	if baseNodeshim != "" {
		baseNodeshim = testutil.InstallAsImage(b, baseNodeshim, filepath.Join(work, "image-base"))
	}

	// The node: a kubepods tree of n pods under a cgroup of our own.
	parent := filepath.Join(unified, fmt.Sprintf("nodeshim-footprint-%d", os.Getpid()))
	if err := os.Mkdir(parent, 0o755); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := removeTree(parent); err != nil {
			b.Errorf("remove %s: %v", parent, err)
		}
	})
	created := time.Now()
	loadCg := podTree(b, parent, *footprintPods)
	b.Logf("created %d pod cgroups (and one container cgroup each) under %s in %v", *footprintPods, parent, time.Since(created).Round(time.Millisecond))

	// The cluster the reporter publishes to: a real kube-apiserver and etcd
	// (not measured), deploy/'s Namespace, ServiceAccount and RBAC, and the
	// Node.
	cluster := kubetest.Start(b)
	rbac, err := ReporterAccess()
	if err != nil {
		b.Fatal(err)
	}
	ctx0 := context.Background()
	if err := kubetest.Apply(ctx0, cluster.AdminConfig(), rbac); err != nil {
		b.Fatal(err)
	}
	for _, node := range []string{footprintNode, footprintBaseNode} {
		if _, err := cluster.AdminClient(b).CoreV1().Nodes().Create(ctx0, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	reporterKubeconfig := cluster.Kubeconfig(b, "reporter", cluster.ServiceAccountConfig(b, namespace, "nodeshim-reporter"))
	metricsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	metricsAddr := metricsLn.Addr().String()
	metricsLn.Close()
	names := []string{"serve", "reporter", "pressure-watch", "baseline-go"}
	if *footprintBaseline != "" {
		names = append(names, "serve-base", "reporter-base")
	}

	// One v1 memory cgroup per process on a hybrid hierarchy.
	memcgs := map[string]string{}
	if _, err := os.Stat(filepath.Join(v1Memory, "memory.limit_in_bytes")); err == nil {
		for _, n := range names {
			d := filepath.Join(v1Memory, fmt.Sprintf("nodeshim-footprint-%d-%s", os.Getpid(), n))
			if err := os.Mkdir(d, 0o755); err != nil {
				b.Fatal(err)
			}
			memcgs[n] = d
			b.Cleanup(func() { removeCgroup(b, d) })
		}
	}
	root := filepath.Join(work, "root")
	socket := filepath.Join(root, "nodeshim.sock")
	logs := map[string]*bytes.Buffer{}
	for _, n := range names {
		logs[n] = &bytes.Buffer{}
	}
	cmds := map[string]*exec.Cmd{
		"serve": startIn(b, parent, memcgs["serve"], logs["serve"], bin, "serve", "--root-dir="+root,
			"--lock-file="+filepath.Join(work, "nodeshim.lock"), "--config-source="+shimConfigDir(b), "--host-root=/"),
		"pressure-watch": startIn(b, parent, memcgs["pressure-watch"], logs["pressure-watch"], bin, "pressure", "--watch"),
		"baseline-go":    startIn(b, parent, memcgs["baseline-go"], logs["baseline-go"], baseBin),
		// As root here: the shim's socket admits root only until the shim
		// can be configured to admit the reporter's uid.
		"reporter": startIn(b, parent, memcgs["reporter"], logs["reporter"], reporterBin, "--kubeconfig="+reporterKubeconfig,
			"--node-name="+footprintNode, "--namespace="+namespace, "--socket="+socket, "--metrics-addr="+metricsAddr),
	}
	var baseMetrics string
	if base := baseNodeshim; base != "" {
		// The same shim and reporter from another build, beside this one:
		// its own root, lock and Node, a metrics port of its own.
		baseRoot := filepath.Join(work, "root-base")
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		baseMetrics = ln.Addr().String()
		ln.Close()
		cmds["serve-base"] = startIn(b, parent, memcgs["serve-base"], logs["serve-base"], base, "serve", "--root-dir="+baseRoot,
			"--lock-file="+filepath.Join(work, "nodeshim-base.lock"), "--config-source="+shimConfigDir(b), "--host-root=/")
		cmds["reporter-base"] = startIn(b, parent, memcgs["reporter-base"], logs["reporter-base"], base, "reporter", "--kubeconfig="+reporterKubeconfig,
			"--node-name="+footprintBaseNode, "--namespace="+namespace, "--socket="+filepath.Join(baseRoot, "nodeshim.sock"), "--metrics-addr="+baseMetrics)
	}
	procs := map[string]*measured{}
	for _, n := range names {
		procs[n] = &measured{name: n, pid: cmds[n].Process.Pid, memcg: memcgs[n]}
	}
	defer func() {
		for _, n := range names {
			stop(cmds[n], syscall.SIGTERM)
		}
		if b.Failed() {
			for _, n := range names {
				b.Logf("%s output:\n%s", n, logs[n])
			}
		}
	}()

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			for _, n := range names {
				procs[n].sample()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	// A Prometheus scraper: the reporter's /metrics every 30 s, which
	// relays the shim's own metrics (read over the socket).
	var scrapes, scrapeErrs int
	var scrapeErr error
	go func() {
		defer wg.Done()
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			_, err := scrape(metricsAddr)
			scrapes++
			if err != nil {
				scrapeErrs++
				scrapeErr = err
			}
		}
	}()
	stopSampling := func() { cancel(); wg.Wait() }
	defer stopSampling()

	time.Sleep(*footprintWarmup)
	var baseWrites0, baseWrites1 float64
	writes0 := apiWrites(b, metricsAddr)
	if baseMetrics != "" {
		baseWrites0 = apiWrites(b, baseMetrics)
	}
	idleFrom := map[string]int{}
	for _, n := range names {
		procs[n].sample()
		idleFrom[n] = procs[n].mark() - 1
	}
	time.Sleep(*footprintIdle)
	writes1 := apiWrites(b, metricsAddr)
	if baseMetrics != "" {
		baseWrites1 = apiWrites(b, baseMetrics)
	}

	// Pressure episode.
	kp := filepath.Join(parent, "kubepods.slice")
	psiFiles := []string{"/proc/pressure/cpu", "/proc/pressure/memory", filepath.Join(kp, "cpu.pressure"), filepath.Join(kp, "memory.pressure")}
	psiBefore := make([]uint64, len(psiFiles))
	for i, f := range psiFiles {
		if psiBefore[i], err = psiTotal(f); err != nil {
			b.Fatal(err)
		}
	}
	pressureFrom := map[string]int{}
	for _, n := range names {
		procs[n].sample()
		pressureFrom[n] = procs[n].mark() - 1
	}
	big := filepath.Join(work, "pagecache.bin")
	// 256 MiB written with O_DIRECT, so that no page of it is cached (and
	// charged elsewhere) before the thrasher faults it in.
	if out, err := exec.Command("dd", "if=/dev/urandom", "of="+big, "bs=1M", "count=256", "oflag=direct", "status=none").CombinedOutput(); err != nil {
		b.Fatalf("dd: %v %s", err, out)
	}
	var loads []*exec.Cmd
	stopLoads := func() {
		for _, l := range loads {
			stop(l, syscall.SIGKILL)
		}
		loads = nil
	}
	defer stopLoads()
	loads = append(loads, startLoad(b, loadCg, "while :; do :; done"), startLoad(b, loadCg, "while :; do :; done"))
	memcg := ""
	if st, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err == nil && st.Mode().IsRegular() {
		// Hybrid hierarchy: the memory controller is v1. The thrasher's
		// memcg reclaim stalls are still accounted to its cgroup2 cgroups'
		// memory.pressure (PSI follows the default hierarchy).
		memcg = fmt.Sprintf("/sys/fs/cgroup/memory/nodeshim-footprint-%d", os.Getpid())
		if err := os.Mkdir(memcg, 0o755); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { removeCgroup(b, memcg) })
		if err := os.WriteFile(filepath.Join(memcg, "memory.limit_in_bytes"), []byte("64M"), 0o644); err != nil {
			b.Fatal(err)
		}
	} else {
		// Pure cgroup2: limit the container cgroup itself.
		if err := os.WriteFile(filepath.Join(loadCg, "memory.max"), []byte("64M"), 0o644); err != nil {
			testutil.Skip(b, "memory controller not delegated to %s: %v", loadCg, err)
		}
	}
	// The thrasher: this test binary in thrash mode, started in the pod's
	// cgroup2 cgroup, moved into the memory cgroup before it faults.
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	startR, startW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	defer startW.Close()
	lfd, err := os.Open(loadCg)
	if err != nil {
		b.Fatal(err)
	}
	thrash := exec.Command(self)
	thrash.Env = append(os.Environ(), envThrash+"="+big)
	thrash.Stdin, thrash.Stderr = startR, os.Stderr
	thrash.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(lfd.Fd()), Setpgid: true}
	err = thrash.Start()
	lfd.Close()
	startR.Close()
	if err != nil {
		b.Fatal(err)
	}
	if memcg != "" {
		if err := os.WriteFile(filepath.Join(memcg, "cgroup.procs"), []byte(strconv.Itoa(thrash.Process.Pid)), 0o644); err != nil {
			stop(thrash, syscall.SIGKILL)
			b.Fatal(err)
		}
	}
	if _, err := startW.Write([]byte{1}); err != nil {
		stop(thrash, syscall.SIGKILL)
		b.Fatal(err)
	}
	loads = append(loads, thrash)
	time.Sleep(*footprintPressure)
	writes2 := apiWrites(b, metricsAddr)
	if m, err := scrape(metricsAddr); err != nil || m["nodeshim_reporter_shim_up"] != 1 {
		b.Errorf("the reporter does not read the shim (nodeshim_reporter_shim_up %v, %v)", m["nodeshim_reporter_shim_up"], err)
	}
	for _, n := range names {
		procs[n].sample()
	}
	end := map[string]int{}
	for _, n := range names {
		end[n] = procs[n].mark()
	}
	stopLoads()
	psiDelta := make([]float64, len(psiFiles))
	for i, f := range psiFiles {
		after, err := psiTotal(f)
		if err != nil {
			b.Fatal(err)
		}
		psiDelta[i] = float64(after-psiBefore[i]) / 1000
	}
	stopSampling()
	if scrapeErrs > 0 {
		b.Errorf("%d of %d scrapes of the reporter failed, last: %v", scrapeErrs, scrapes, scrapeErr)
	}
	if scrapes == 0 {
		b.Error("no scrape of the reporter happened")
	}

	for _, n := range names {
		if err := procs[n].err; err != nil {
			b.Fatal(err)
		}
		if err := cmds[n].Process.Signal(syscall.Signal(0)); err != nil {
			b.Fatalf("%s exited during the run: %v", n, err)
		}
	}
	b.Logf("kernel %s; %d pods; warm-up %v, idle %v, pressure %v; %d scrapes", kernelRelease(), *footprintPods, *footprintWarmup, *footprintIdle, *footprintPressure, scrapes)
	idleWrites := writes1 - writes0
	idleWritesPer10s := idleWrites / footprintIdle.Seconds() * 10
	b.Logf("reporter API writes: %.0f in the idle window (%.2f per 10 s), %.0f during the pressure episode", idleWrites, idleWritesPer10s, writes2-writes1)
	if baseMetrics != "" {
		b.Logf("reporter-base API writes: %.0f in the idle window (%.2f per 10 s)", baseWrites1-baseWrites0, (baseWrites1-baseWrites0)/footprintIdle.Seconds()*10)
	}
	if m, err := scrape(metricsAddr); err == nil {
		var kinds []string
		for k, v := range m {
			if strings.HasPrefix(k, "nodeshim_reporter_api_writes_total") || strings.HasPrefix(k, "nodeshim_reporter_shim_reads_total") {
				kinds = append(kinds, fmt.Sprintf("%s=%.0f", k, v))
			}
		}
		slices.Sort(kinds)
		b.Logf("reporter counters at the end: %s", strings.Join(kinds, " "))
	}
	b.Logf("pressure episode, some-stall ms: node cpu %.0f, node memory %.0f, kubepods cpu %.0f, kubepods memory %.0f",
		psiDelta[0], psiDelta[1], psiDelta[2], psiDelta[3])
	b.Logf("%-15s %12s %12s %12s %12s %12s %14s %14s %10s %12s %12s", "process", "idle RSS", "(anon)", "(file)", "idle max", "idle CPU", "pressure RSS", "pressure CPU", "VmHWM", "memcg WS", "WS max")
	results := map[string][2]window{}
	for _, n := range names {
		p := procs[n]
		idle := p.window(idleFrom[n], pressureFrom[n]+1, *footprintIdle)
		pres := p.window(pressureFrom[n], end[n], *footprintPressure)
		results[n] = [2]window{idle, pres}
		p.mu.Lock()
		hwm := float64(p.samples[len(p.samples)-1].hwmKiB) / 1024
		p.mu.Unlock()
		wsMax := max(idle.maxWSMiB, pres.maxWSMiB)
		b.Logf("%-15s %8.1f MiB %8.1f MiB %8.1f MiB %8.1f MiB %10.3f%% %10.1f MiB %12.3f%% %6.1f MiB %8.1f MiB %8.1f MiB",
			n, idle.meanRSSMiB, idle.meanAnonMiB, idle.meanFileMiB, idle.maxRSSMiB, idle.cpuPct, pres.meanRSSMiB, pres.cpuPct, hwm, idle.meanWSMiB, wsMax)
		b.Run(n, func(b *testing.B) {
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(idle.meanRSSMiB, "idle-rss-MiB")
			b.ReportMetric(idle.meanAnonMiB, "idle-anon-MiB")
			b.ReportMetric(idle.meanFileMiB, "idle-file-MiB")
			b.ReportMetric(idle.cpuPct, "idle-cpu-%core")
			b.ReportMetric(pres.meanRSSMiB, "pressure-rss-MiB")
			b.ReportMetric(pres.cpuPct, "pressure-cpu-%core")
			b.ReportMetric(hwm, "hwm-MiB")
			if n == "reporter" {
				b.ReportMetric(idleWritesPer10s, "idle-api-writes/10s")
			}
			if memcgs[n] != "" {
				b.ReportMetric(idle.meanWSMiB, "idle-memcg-ws-MiB")
				b.ReportMetric(wsMax, "max-memcg-ws-MiB")
			}
		})
		if n == "serve" {
			// The targets are reported, not enforced: BENCHMARKS.md (footprint)
			// says which are met and why.
			b.Logf("target: serve's peak RSS %.1f MiB under %d MiB: %s; idle CPU %.3f%% of a core under %.1f%%: %s",
				hwm, targetShimRSSMiB, verdict(hwm < targetShimRSSMiB), idle.cpuPct, targetShimIdleCPUPct, verdict(idle.cpuPct < targetShimIdleCPUPct))
		}
		if n == "reporter" {
			b.Logf("target: reporter's peak RSS %.1f MiB under %d MiB: %s; API writes %.2f per 10 s idle under %d: %s",
				hwm, targetReporterRSSMiB, verdict(hwm < targetReporterRSSMiB), idleWritesPer10s, targetReporterWritesPer, verdict(idleWritesPer10s < targetReporterWritesPer))
		}
	}
	if psiDelta[2] == 0 || psiDelta[3] == 0 {
		b.Errorf("the pressure episode caused no stall in kubepods (cpu %.0f ms, memory %.0f ms): it did not happen", psiDelta[2], psiDelta[3])
	}
}

func kernelRelease() string {
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		return "unknown"
	}
	var s strings.Builder
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		s.WriteByte(byte(c))
	}
	return s.String()
}

// footprintNode is the Node the reporter reports on, footprintBaseNode
// the one of the reporter of -footprint.baseline.
const (
	footprintNode     = "node-a"
	footprintBaseNode = "node-b"
)

// scrape reads a Prometheus text exposition and returns each sample's
// value by its name and labels as written.
func scrape(addr string) (map[string]float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			continue
		}
		out[l[:i]] = v
	}
	return out, sc.Err()
}

// apiWrites is the reporter's count of successful writes to the API
// server, every kind together (status, lease, event).
func apiWrites(b *testing.B, addr string) float64 {
	b.Helper()
	m, err := scrape(addr)
	if err != nil {
		b.Fatalf("scrape the reporter: %v", err)
	}
	var n float64
	found := false
	for k, v := range m {
		if strings.HasPrefix(k, "nodeshim_reporter_api_writes_total") {
			n += v
			found = true
		}
	}
	if !found {
		b.Fatalf("the reporter's metrics have no nodeshim_reporter_api_writes_total")
	}
	return n
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}
