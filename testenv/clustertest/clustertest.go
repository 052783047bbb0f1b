// Package clustertest runs a real Kubernetes cluster for tests: the etcd
// and kube-apiserver of testenv/kubetest, kube-controller-manager,
// kube-scheduler and a kubelet whose container runtime is the containerd
// 1.6 (CRI) of testenv/runtimetest, or its containerd 2.x
// (Env.Containerd2). This machine registers as the Node, named after its
// hostname, and goes Ready with kubelet's own conditions and Lease; pods
// run in containerd with the pause image of runtimetest. Env.Node joins
// more nodes, each in a network namespace of its own with its own
// containerd 2.x and kubelet (see Node).
//
// One Env serves a whole test package, so that the cluster starts once:
//
//	var cluster clustertest.Env
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		if err := cluster.Close(); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			code = 1
//		}
//		os.Exit(code)
//	}
//
//	func TestX(t *testing.T) {
//		c := cluster.Cluster(t) // started on first use
//		...
//	}
//
// # Binaries
//
// kubelet, kube-controller-manager and kube-scheduler are found through
// NODESHIM_KUBELET, NODESHIM_KUBE_CONTROLLER_MANAGER and
// NODESHIM_KUBE_SCHEDULER (mk/reporter.mk builds them in kube-apiserver's
// tools module), else on PATH; kubetest and runtimetest gate the rest. A
// missing binary skips the test through testutil, which fails it under
// NODESHIM_REQUIRE_PRIVILEGED=1.
//
// # The kubelet on this machine
//
// The KubeletConfiguration carries what this host needs (FACTS: cgroupfs,
// failSwapOn false, failCgroupV1 false for the hybrid layout, maxOpenFiles
// within the hard nofile limit, makeIPTablesUtilChains false, oomScoreAdj
// 0) and keeps what it can under the Env's directory: --root-dir, pod
// logs, its serving certificate, the volume plugin directory, and its cgroups under
// runtimetest's per-Env cgroup parent. It serves on 127.0.0.1 on a free
// port, without authentication (a loopback test cluster). Every component
// authenticates with kubetest's admin token.
//
// What kubelet touches outside its directories is put back by Close: the
// sysctls it sets (kernel.panic, kernel.panic_on_oops, vm.overcommit_memory,
// vm.panic_on_oom, kernel.keys.root_maxkeys, kernel.keys.root_maxbytes:
// while kubelet's values hold, an oops reboots the machine), the
// directories it creates on the host (/var/lib/kubelet/device-plugins,
// /var/log/containers, /var/log/pods, and kubelet's default cert and
// volume plugin directories) when they did not exist, and the
// mounts under its root dir (its own bind mount, pods' volumes). Pods that
// kubelet left in containerd are removed before runtimetest's Close.
//
// # One cluster per machine at a time
//
// kubelet's sysctls, its device-plugin socket and the node name are the
// machine's: two clusters at once (two test packages, two checkouts) would
// restore each other's sysctls wrongly. A cluster holds an flock on
// LockPath from its start to its Close; another waits for it.
package clustertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/internal/mountinfo"
	"github.com/nodeshim/nodeshim/testenv/kubetest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testproc"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// Environment variables naming the node's binaries (set by mk/reporter.mk).
const (
	EnvKubelet           = "NODESHIM_KUBELET"
	EnvControllerManager = "NODESHIM_KUBE_CONTROLLER_MANAGER"
	EnvScheduler         = "NODESHIM_KUBE_SCHEDULER"
)

// LockPath is the machine-wide lock a cluster holds while it runs. The
// file stays (an unheld flock on an empty file).
var LockPath = filepath.Join(os.TempDir(), "nodeshim-clustertest.lock")

// readyTimeout bounds the wait for the Node to turn Ready.
const readyTimeout = 3 * time.Minute

// kubeletSysctls are the sysctls kubelet sets at start
// (pkg/kubelet/cm.setupKernelTunables); Close restores them.
var kubeletSysctls = []string{
	"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes",
}

// hostDirs are the host directories kubelet creates whatever its
// configuration; Close removes those that did not exist before.
// /var/lib/kubelet/pki and /usr/libexec/kubernetes are kubelet's defaults
// for --cert-dir and --volume-plugin-dir, which the Env moves: listed in
// case a kubelet version uses them anyway.
var hostDirs = []string{
	"/var/lib/kubelet/device-plugins", "/var/lib/kubelet/pki", "/var/log/containers", "/var/log/pods",
	"/usr/libexec/kubernetes",
}

// Timings are how long the cluster's start took.
type Timings struct {
	// ControlPlane: etcd and kube-apiserver ready.
	ControlPlane time.Duration
	// NodeReady: from kubelet's start to the Node's Ready condition.
	NodeReady time.Duration
}

// Env is a test package's cluster, started on first use and stopped by
// Close. The zero value is ready to use; an Env must not be copied.
type Env struct {
	// Containerd2 makes containerd 2.x (runtimetest's Containerd2, with
	// CRIU and restore through CreateContainer) kubelet's runtime instead
	// of containerd 1.6. Set it before the first use.
	Containerd2 bool
	// Handlers2 are runtime handlers added to containerd 2.x's config
	// (runtimetest.Env.Handlers2). Set them before the first use.
	Handlers2 []runtimetest.Handler
	// Containerd2Dir, when set, is the directory of another containerd
	// 2.x release's binaries (runtimetest.Env.Containerd2Dir). Set it
	// before the first use.
	Containerd2Dir string

	mu      sync.Mutex
	rt      runtimetest.Env
	cluster *Cluster
	err     error
	nodes   []*Node // joined by Node, closed before the cluster
}

// Cluster is the running single-node cluster.
type Cluster struct {
	// API is the control plane (etcd and kube-apiserver).
	API *kubetest.Cluster
	// Containerd is the node's container runtime.
	Containerd *runtimetest.Containerd
	// Images are runtimetest's images, imported into Containerd.
	Images *runtimetest.Images
	// NodeName is the Node this machine registered as.
	NodeName string
	// Dir holds every component's state and logs.
	Dir string
	// KubeletRootDir is kubelet's --root-dir.
	KubeletRootDir string
	// CgroupRoot is kubelet's cgroupRoot; pods live below it.
	CgroupRoot string
	// Timings of the start.
	Timings Timings

	lock       *os.File
	kubeconfig string // the admin's, which every component uses
	sysctls    map[string]string
	created    []string // host directories that did not exist at start
	procs      []*testproc.Proc
}

// Cluster returns the Env's cluster, starting it on first use. It gates t
// on root and the binaries, and fails t if the cluster did not come up.
func (e *Env) Cluster(t testing.TB) *Cluster {
	t.Helper()
	testutil.RequireRoot(t)
	bins := nodeBinaries{
		kubelet:   binary(t, EnvKubelet, "kubelet"),
		kcm:       binary(t, EnvControllerManager, "kube-controller-manager"),
		scheduler: binary(t, EnvScheduler, "kube-scheduler"),
	}
	bins.apiserver, bins.etcd = kubetest.Binaries(t)
	var ctrd *runtimetest.Containerd
	if e.Containerd2 {
		e.rt.Handlers2, e.rt.Containerd2Dir = e.Handlers2, e.Containerd2Dir
		ctrd = e.rt.Containerd2(t)
	} else {
		ctrd = e.rt.Containerd(t)
	}
	img := e.rt.Images(t)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cluster == nil && e.err == nil {
		e.cluster, e.err = start(bins, ctrd, img)
	}
	if e.err != nil {
		t.Fatal(e.err)
	}
	return e.cluster
}

// Close stops the cluster, removes what kubelet left in containerd and on
// the host, then closes the runtimes. It returns an error naming anything
// that had to be cleaned up by force.
func (e *Env) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	for i := len(e.nodes) - 1; i >= 0; i-- {
		errs = append(errs, e.nodes[i].close())
	}
	e.nodes = nil
	if e.cluster != nil {
		errs = append(errs, e.cluster.close())
		e.cluster = nil
	}
	errs = append(errs, e.rt.Close())
	return errors.Join(errs...)
}

type nodeBinaries struct {
	kubelet, kcm, scheduler, apiserver, etcd string
}

func binary(t testing.TB, env, name string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		testutil.RequireFile(t, p)
		return p
	}
	return testutil.RequireBinary(t, name)
}

func start(bins nodeBinaries, ctrd *runtimetest.Containerd, img *runtimetest.Images) (c *Cluster, err error) {
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("clustertest: %w", err)
	}
	lock, err := os.OpenFile(LockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("clustertest: %w", err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		lock.Close()
		return nil, fmt.Errorf("clustertest: lock %s: %w", LockPath, err)
	}
	dir, err := os.MkdirTemp("", "nsct-")
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("clustertest: %w", err)
	}
	c = &Cluster{
		lock:           lock,
		Containerd:     ctrd,
		Images:         img,
		NodeName:       strings.ToLower(host),
		Dir:            dir,
		KubeletRootDir: filepath.Join(dir, "kubelet"),
		// Below runtimetest's per-Env cgroup, which its Close removes.
		CgroupRoot: filepath.Join(filepath.Dir(ctrd.CgroupRoot), "kubelet"),
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.close())
		}
	}()
	for _, d := range []string{"api", "kubelet", "pod-logs", "volume-plugins"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return c, fmt.Errorf("clustertest: %w", err)
		}
	}

	begin := time.Now()
	c.API, err = kubetest.StartIn(filepath.Join(dir, "api"), bins.apiserver, bins.etcd)
	if err != nil {
		return c, fmt.Errorf("clustertest: control plane: %w", err)
	}
	c.Timings.ControlPlane = time.Since(begin)
	kubeconfig, err := c.API.WriteKubeconfig("admin", c.API.AdminConfig())
	if err != nil {
		return c, fmt.Errorf("clustertest: %w", err)
	}
	c.kubeconfig = kubeconfig

	cm, err := c.startProc("kube-controller-manager", bins.kcm,
		"--kubeconfig="+kubeconfig,
		"--root-ca-file="+c.API.CAFile(),
		"--service-account-private-key-file="+filepath.Join(c.API.Dir, "sa.key"),
		"--leader-elect=false",
		"--secure-port=0",
		"--v=1")
	if err != nil {
		return c, err
	}
	sched, err := c.startProc("kube-scheduler", bins.scheduler,
		"--kubeconfig="+kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--v=1")
	if err != nil {
		return c, err
	}

	if err := c.saveHost(); err != nil {
		return c, err
	}
	if err := makeCgroup(c.CgroupRoot); err != nil {
		return c, err
	}
	port, err := freePort()
	if err != nil {
		return c, err
	}
	cfg := filepath.Join(dir, "kubelet.yaml")
	k := kubelet{address: "127.0.0.1", port: port, endpoint: c.Containerd.Address, cgroupRoot: c.CgroupRoot, podLogsDir: filepath.Join(dir, "pod-logs")}
	if err := os.WriteFile(cfg, []byte(kubeletConfig(k)), 0o600); err != nil {
		return c, fmt.Errorf("clustertest: %w", err)
	}
	begin = time.Now()
	kubelet, err := c.startProc("kubelet", bins.kubelet,
		"--config="+cfg,
		"--kubeconfig="+kubeconfig,
		"--root-dir="+c.KubeletRootDir,
		// Both default to fixed host paths whatever --root-dir says.
		"--cert-dir="+filepath.Join(dir, "kubelet-pki"),
		"--volume-plugin-dir="+filepath.Join(dir, "volume-plugins"),
		"--v=1")
	if err != nil {
		return c, err
	}
	if err := c.waitReady(c.NodeName, dir, cm, sched, kubelet); err != nil {
		return c, err
	}
	c.Timings.NodeReady = time.Since(begin)
	return c, nil
}

// kubelet is what differs between the KubeletConfigurations of the
// cluster's nodes.
type kubelet struct {
	// address and port are where kubelet serves.
	address string
	port    int
	// endpoint is the CRI socket's path.
	endpoint string
	// cgroupRoot holds the node's pods; podLogsDir their logs.
	cgroupRoot, podLogsDir string
}

// kubeletConfig is the KubeletConfiguration of a kubelet on this machine.
func kubeletConfig(k kubelet) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[5]s
port: %[1]d
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
containerRuntimeEndpoint: unix://%[2]s
imageServiceEndpoint: unix://%[2]s
cgroupDriver: cgroupfs
cgroupRoot: %[3]s
failSwapOn: false
failCgroupV1: false
maxOpenFiles: 20000
makeIPTablesUtilChains: false
oomScoreAdj: 0
podLogsDir: %[4]s
registerNode: true
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 1Mi
  nodefs.available: 1%%
  imagefs.available: 1%%
  nodefs.inodesFree: 1%%
syncFrequency: 10s
fileCheckFrequency: 5s
`, k.port, k.endpoint, k.cgroupRoot, k.podLogsDir, k.address)
}

// waitReady waits for Node node's Ready condition, failing as soon as one
// of procs exits; dir holds its kubelet's log.
func (c *Cluster) waitReady(node, dir string, procs ...*testproc.Proc) error {
	cs, err := kubernetes.NewForConfig(c.API.AdminConfig())
	if err != nil {
		return fmt.Errorf("clustertest: %w", err)
	}
	deadline := time.Now().Add(readyTimeout)
	for {
		for _, p := range procs {
			select {
			case <-p.Exited():
				return fmt.Errorf("clustertest: %s exited (%v); log %s:\n%s", p.Name, p.Err(), p.Log, testproc.Tail(p.Log, 30))
			default:
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		cancel()
		if err == nil && Ready(n) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("clustertest: node %s not Ready within %v (last error %v); kubelet log:\n%s", node, readyTimeout, err, testproc.Tail(filepath.Join(dir, "kubelet.log"), 40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Ready reports whether n's Ready condition is True.
func Ready(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Log returns the last lines of a component's log ("kubelet",
// "kube-controller-manager", "kube-scheduler"; the control plane's are
// API.Logs).
func (c *Cluster) Log(name string) string {
	return testproc.Tail(filepath.Join(c.Dir, name+".log"), 60)
}

// saveHost records the sysctls kubelet sets and which of the host
// directories it creates exist already.
func (c *Cluster) saveHost() error {
	var err error
	if c.sysctls, err = readSysctls(); err != nil {
		return err
	}
	for _, d := range hostDirs {
		if _, err := os.Lstat(d); errors.Is(err, os.ErrNotExist) {
			c.created = append(c.created, d)
		}
	}
	return nil
}

// readSysctls reads the sysctls kubelet sets.
func readSysctls() (map[string]string, error) {
	out := map[string]string{}
	for _, s := range kubeletSysctls {
		b, err := os.ReadFile(sysctlPath(s))
		if err != nil {
			return nil, fmt.Errorf("clustertest: sysctl %s: %w", s, err)
		}
		out[s] = strings.TrimSpace(string(b))
	}
	return out, nil
}

// restoreSysctls writes back what readSysctls read.
func restoreSysctls(saved map[string]string) error {
	var errs []error
	for name, v := range saved {
		if err := os.WriteFile(sysctlPath(name), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("clustertest: restore sysctl %s=%s: %w", name, v, err))
		}
	}
	return errors.Join(errs...)
}

func sysctlPath(name string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/"))
}

// close stops the components, removes kubelet's pods from containerd and
// puts the host back as saveHost found it.
func (c *Cluster) close() error {
	var errs []error
	// kubelet first: it must not restart what is removed below.
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].Stop()
	}
	if c.Containerd != nil {
		errs = append(errs, removePods(c.Containerd))
	}
	if c.API != nil {
		c.API.Stop()
	}
	errs = append(errs, restoreSysctls(c.sysctls))
	for i := len(c.created) - 1; i >= 0; i-- {
		if err := os.RemoveAll(c.created[i]); err != nil {
			errs = append(errs, fmt.Errorf("clustertest: %w", err))
		}
	}
	errs = append(errs, unmountUnder(c.Dir))
	if err := os.RemoveAll(c.Dir); err != nil {
		errs = append(errs, fmt.Errorf("clustertest: %w", err))
	}
	if c.lock != nil {
		c.lock.Close() // releases the flock
	}
	return errors.Join(errs...)
}

// removePods stops and removes every pod sandbox left in containerd:
// kubelet does not stop its pods when it exits.
func removePods(c *runtimetest.Containerd) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pods, err := c.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("clustertest: list pods: %w", err)
	}
	var errs []error
	for _, p := range pods.Items {
		if _, err := c.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			errs = append(errs, fmt.Errorf("clustertest: stop pod %s: %w", p.Id, err))
		}
		if _, err := c.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			errs = append(errs, fmt.Errorf("clustertest: remove pod %s: %w", p.Id, err))
		}
	}
	return errors.Join(errs...)
}

// makeCgroup creates rel in every cgroup hierarchy: kubelet requires its
// cgroupRoot to exist.
func makeCgroup(rel string) error {
	entries, err := mounts()
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.FSType != "cgroup" && e.FSType != "cgroup2" {
			continue
		}
		if err := os.MkdirAll(filepath.Join(e.Point, rel), 0o755); err != nil {
			return fmt.Errorf("clustertest: cgroup %s: %w", rel, err)
		}
	}
	return nil
}

func mounts() ([]mountinfo.Entry, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("clustertest: %w", err)
	}
	entries, err := mountinfo.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("clustertest: /proc/self/mountinfo: %w", err)
	}
	return entries, nil
}

// MountsUnder returns the mount points at or below dir, in mount order.
func MountsUnder(dir string) ([]string, error) {
	entries, err := mounts()
	if err != nil {
		return nil, err
	}
	var points []string
	for _, e := range entries {
		if e.Point == dir || strings.HasPrefix(e.Point, dir+"/") {
			points = append(points, e.Point)
		}
	}
	return points, nil
}

// unmountUnder detaches every mount at or below dir, latest first. kubelet
// leaves its root dir's bind mount behind by design, so these are not
// reported as leaks.
func unmountUnder(dir string) error {
	points, err := MountsUnder(dir)
	if err != nil {
		return err
	}
	var errs []error
	for i := len(points) - 1; i >= 0; i-- {
		if err := syscall.Unmount(points[i], syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("clustertest: unmount %s: %w", points[i], err))
		}
	}
	return errors.Join(errs...)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("clustertest: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
