package runtimetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// CRINamespace is the containerd namespace of the CRI plugin.
const CRINamespace = "k8s.io"

// Host paths containerd 1.6 and the CNI plugins use whatever the config
// says (see the package doc).
const (
	shimSocketDir  = "/run/containerd/s"
	cniResultsDir  = "/var/lib/cni/results"
	startupTimeout = 60 * time.Second
	callTimeout    = 2 * time.Minute
)

// Containerd is a running containerd with its CRI plugin, on private state.
type Containerd struct {
	// Dir holds the config, root, state, sockets, CNI config and the log.
	Dir string
	// Address is the path of containerd's gRPC socket (the CRI endpoint).
	Address string
	// Config is the path of the generated config.toml.
	Config string
	// CgroupRoot is the cgroup parent under which every pod's cgroup is
	// created (cgroupfs driver), e.g. "/nsrt-0123abcd/containerd".
	CgroupRoot string
	// Network is the CNI network's name; Bridge the bridge device's.
	Network, Bridge string
	// Runtime and Image are CRI clients on Address.
	Runtime runtimeapi.RuntimeServiceClient
	Image   runtimeapi.ImageServiceClient

	// Version is the containerd's own `containerd --version` line.
	Version string

	flavor   containerdFlavor
	handlers []Handler
	netns    string // the network namespace containerd runs in; empty for this one
	bin, ctr string
	cmd      *exec.Cmd
	exited   chan struct{}
	waitErr  error
	logPath  string
	conn     *grpc.ClientConn
	mu       sync.Mutex
	sandbox  map[string]bool // every sandbox id run, for the shim sockets
	hostDirs []string        // host directories that did not exist at start
}

// binaries the CRI runs need; gates t on each.
type containerdBins struct {
	containerd, ctr, runc, crun, unshare string
}

// containerdFlavor is what differs between the two containerd peers:
// Debian's 1.6 (config version 2) and 2.x from the module proxy (config
// version 3, its own shim and ctr, CRIU and restore through CreateContainer).
type containerdFlavor struct {
	// name is the Env subdirectory, e.g. "containerd2".
	name string
	// v2 selects containerd 2.x's config (runc is its only handler).
	v2 bool
	// path is PATH for containerd and its shims (2.x: CRIU's directory,
	// then the directory of containerd and its shim, then the system's).
	path string
	// net is the CNI network's and bridge's name prefix; octet the
	// second octet of its 10.x.y.0/24 subnet.
	net   string
	octet int
}

// Containerd returns the Env's containerd 1.6 (Debian's), starting it (and
// importing the images) on first use. It gates t on root and the binaries,
// and fails t if containerd did not start.
func (e *Env) Containerd(t testing.TB) *Containerd {
	t.Helper()
	testutil.RequireRoot(t)
	bins := containerdBins{
		containerd: testutil.RequireTool(t, EnvContainerd, "containerd"),
		ctr:        testutil.RequireBinary(t, "ctr"),
	}
	testutil.RequireBinary(t, "containerd-shim-runc-v2")
	f := containerdFlavor{name: "containerd", net: "nsrt", octet: 233}
	return e.containerdOnce(t, &e.containerd, &e.containerdErr, bins, f)
}

// Containerd2 returns the Env's containerd 2.x (NODESHIM_CONTAINERD2, the
// directory holding containerd, containerd-shim-runc-v2 and ctr that
// mk/runtime.mk builds), started on first use on its own private state
// beside Containerd's, with CRIU (NODESHIM_CRIU, else PATH) for its CRI
// CheckpointContainer and its restore through CreateContainer. It gates t
// on root, the binaries and CRIU, and fails t if containerd did not start.
func (e *Env) Containerd2(t testing.TB) *Containerd {
	t.Helper()
	testutil.RequireRoot(t)
	// The kernel-matrix guests carry no container runtime ("containerd").
	testutil.SkipIfGuestLacks(t, "containerd")
	dir := e.Containerd2Dir
	if dir == "" {
		dir = os.Getenv(EnvContainerd2)
	}
	if dir == "" {
		testutil.Skip(t, "needs containerd 2.x: %s names the directory of its binaries (make test builds it under .tools)", EnvContainerd2)
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
		testutil.RequireFile(t, filepath.Join(dir, b))
	}
	criuBin := testutil.RequireTool(t, "NODESHIM_CRIU", "criu")
	bins := containerdBins{containerd: filepath.Join(dir, "containerd"), ctr: filepath.Join(dir, "ctr")}
	f := containerdFlavor{name: "containerd2", v2: true, net: "nsr2", octet: 234,
		path: strings.Join([]string{filepath.Dir(criuBin), dir, os.Getenv("PATH")}, string(os.PathListSeparator))}
	return e.containerdOnce(t, &e.containerd2, &e.containerd2Err, bins, f)
}

// containerdOnce starts the containerd of flavor f into *c on first use.
func (e *Env) containerdOnce(t testing.TB, c **Containerd, cerr *error, bins containerdBins, f containerdFlavor) *Containerd {
	t.Helper()
	bins.runc = testutil.RequireBinary(t, RuntimeRunc)
	bins.crun = testutil.RequireBinary(t, RuntimeCrun)
	bins.unshare = testutil.RequireBinary(t, "unshare")
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		testutil.RequireFile(t, filepath.Join(cniBinDir, p))
	}
	img := e.Images(t)
	e.mu.Lock()
	defer e.mu.Unlock()
	if *c == nil && *cerr == nil {
		*c, *cerr = e.startContainerd(bins, img, f)
	}
	if *cerr != nil {
		t.Fatal(*cerr)
	}
	return *c
}

// cniBinDir is where Debian's containernetworking-plugins installs.
const cniBinDir = "/usr/lib/cni"

func (e *Env) startContainerd(bins containerdBins, img *Images, f containerdFlavor) (*Containerd, error) {
	if err := e.setup(); err != nil {
		return nil, err
	}
	crun, err := crunPath(e.dir, bins.crun, bins.unshare)
	if err != nil {
		return nil, err
	}
	bins.crun = crun
	dir := filepath.Join(e.dir, f.name)
	c := &Containerd{
		Dir:        dir,
		Address:    filepath.Join(dir, "containerd.sock"),
		Config:     filepath.Join(dir, "config.toml"),
		CgroupRoot: "/nsrt-" + e.id + "/" + f.name,
		Network:    f.net + "-" + e.id,
		Bridge:     f.net + e.id,
		flavor:     f,
		bin:        bins.containerd,
		ctr:        bins.ctr,
		logPath:    filepath.Join(dir, "containerd.log"),
		sandbox:    map[string]bool{},
	}
	if f.v2 {
		c.handlers, c.netns = e.Handlers2, e.NetNS
	}
	for _, h := range c.handlers {
		if err := os.MkdirAll(filepath.Join(dir, h.Name), 0o700); err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
	}
	hostDirs := []string{"/var/lib/cni", cniResultsDir}
	if !f.v2 {
		hostDirs = append([]string{"/run/containerd", shimSocketDir}, hostDirs...)
	}
	for _, d := range hostDirs {
		if !existed(d) {
			c.hostDirs = append(c.hostDirs, d)
		}
	}
	for _, d := range []string{"root", "state", "opt", "cni/net.d", "cni/ipam", "runc", "crun", "pods", "s"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
	}
	out, err := exec.Command(c.bin, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %s --version: %w", f.name, c.bin, err)
	}
	c.Version = strings.TrimSpace(string(out))
	config := c.configTOML(bins)
	if f.v2 {
		config = c.configTOML3(bins)
	}
	if err := os.WriteFile(c.Config, []byte(config), 0o600); err != nil {
		return nil, fmt.Errorf("%s: %w", f.name, err)
	}
	crictl := fmt.Sprintf("runtime-endpoint: unix://%[1]s\nimage-endpoint: unix://%[1]s\ntimeout: 60\n", c.Address)
	if err := os.WriteFile(c.crictlConfig(), []byte(crictl), 0o600); err != nil {
		return nil, fmt.Errorf("%s: %w", f.name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cni/net.d/10-nsrt.conflist"), []byte(c.cniConfig(e.id)), 0o600); err != nil {
		return nil, fmt.Errorf("%s: %w", f.name, err)
	}

	start := time.Now()
	if err := c.start(); err != nil {
		return c, c.withLog(err)
	}
	took := time.Since(start)

	start = time.Now()
	for _, tar := range []string{img.Pause, img.Busybox} {
		if out, err := c.Ctr("images", "import", tar).CombinedOutput(); err != nil {
			return c, c.withLog(fmt.Errorf("%s: ctr images import %s: %w: %s", f.name, tar, err, bytes.TrimSpace(out)))
		}
	}
	load := time.Since(start)
	if f.v2 {
		e.timings.Containerd2Start, e.timings.Containerd2Load = took, load
	} else {
		e.timings.ContainerdStart, e.timings.ContainerdLoad = took, load
	}
	for _, ref := range []string{PauseImage, BusyboxImage} {
		if err := c.WaitImage(ref); err != nil {
			return c, c.withLog(fmt.Errorf("%s: %w", f.name, err))
		}
	}
	return c, nil
}

// WaitImage waits until the CRI sees the image ref, imported with ctr:
// containerd 2.x's CRI learns of an import from an event, after ctr has
// returned.
func (c *Containerd) WaitImage(ref string) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	for {
		st, err := c.Image.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		if err != nil {
			return fmt.Errorf("CRI image status %s: %w", ref, err)
		}
		if st.Image != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("CRI does not see the imported image %s", ref)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// runtimeTOML is the runtime handler name, run by the runc shim with
// binary as its OCI runtime and its state under the instance's directory,
// in the CRI plugin section plugin of either config version.
func (c *Containerd) runtimeTOML(plugin, name, binary string) string {
	return fmt.Sprintf(`
[%[1]s.containerd.runtimes.%[2]s]
  runtime_type = "io.containerd.runc.v2"
[%[1]s.containerd.runtimes.%[2]s.options]
  BinaryName = %[3]q
  Root = %[4]q
  SystemdCgroup = false
`, plugin, name, binary, filepath.Join(c.Dir, name))
}

// configTOML is containerd 1.6's config (version 2) for this instance.
func (c *Containerd) configTOML(bins containerdBins) string {
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	cri := `plugins."io.containerd.grpc.v1.cri"`
	return fmt.Sprintf(`version = 2
root = %[1]s
state = %[2]s
oom_score = 0
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = %[3]s
[ttrpc]
  address = %[4]s
[debug]
  address = ""
  level = "info"
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]s

[%[6]s]
  sandbox_image = %[7]s
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  max_concurrent_downloads = 1
[%[6]s.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[%[6]s.cni]
  bin_dir = %[8]s
  conf_dir = %[9]s
  max_conf_num = 1
`, q(filepath.Join(c.Dir, "root")), q(filepath.Join(c.Dir, "state")), q(c.Address), q(c.Address+".ttrpc"),
		q(filepath.Join(c.Dir, "opt")), cri, q(PauseImage), q(cniBinDir), q(filepath.Join(c.Dir, "cni/net.d"))) +
		c.runtimeTOML(cri, RuntimeRunc, bins.runc) + c.runtimeTOML(cri, RuntimeCrun, bins.crun)
}

// configTOML3 is containerd 2.x's config (version 3) for this instance:
// as configTOML, with the CRI plugin split into its runtime, images and
// server parts, no imported drop-ins, the shims' sockets in the instance's
// own directory (socket_dir), NRI off, and CRIU checkpoints with restore
// through CreateContainer enabled. runc is its only runtime handler:
// Debian's crun 1.8 refuses the OCI spec version containerd 2.3 writes
// ("unknown version specified").
func (c *Containerd) configTOML3(bins containerdBins) string {
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	rt := `plugins."io.containerd.cri.v1.runtime"`
	return fmt.Sprintf(`version = 3
root = %[1]s
state = %[2]s
oom_score = 0
imports = []
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.nri.v1.nri",
]

[grpc]
  address = %[3]s
[ttrpc]
  address = %[4]s
[debug]
  address = ""
  level = "info"
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]s
[plugins."io.containerd.shim.v1.manager"]
  socket_dir = %[6]s

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  max_concurrent_downloads = 1
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = %[7]s
[%[8]s]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  enable_criu = true
  enable_experimental_restore_via_create = true
[%[8]s.containerd]
  default_runtime_name = "runc"
[%[8]s.cni]
  bin_dirs = [%[9]s]
  conf_dir = %[10]s
  max_conf_num = 1
`, q(filepath.Join(c.Dir, "root")), q(filepath.Join(c.Dir, "state")), q(c.Address), q(c.Address+".ttrpc"),
		q(filepath.Join(c.Dir, "opt")), q(filepath.Join(c.Dir, "s")), q(PauseImage), rt, q(cniBinDir),
		q(filepath.Join(c.Dir, "cni/net.d"))) +
		c.runtimeTOML(rt, RuntimeRunc, bins.runc) + c.handlersTOML(rt)
}

// Handler is a runtime handler of the runc shim (io.containerd.runc.v2)
// running Binary as its OCI runtime, with the pod annotations it passes
// into the OCI spec of the pod's containers (pod_annotations, globs).
type Handler struct {
	Name, Binary   string
	PodAnnotations []string
}

// handlersTOML is the Env's Handlers2 in the CRI plugin section plugin.
func (c *Containerd) handlersTOML(plugin string) string {
	var b strings.Builder
	for _, h := range c.handlers {
		rt := c.runtimeTOML(plugin, h.Name, h.Binary)
		if len(h.PodAnnotations) > 0 {
			q := make([]string, len(h.PodAnnotations))
			for i, a := range h.PodAnnotations {
				q[i] = fmt.Sprintf("%q", a)
			}
			// Into the runtime's table, before its options subtable.
			rt = strings.Replace(rt, "runtime_type = ", "pod_annotations = ["+strings.Join(q, ", ")+"]\n  runtime_type = ", 1)
		}
		b.WriteString(rt)
	}
	return b.String()
}

// cniConfig is the pods' network: the bridge plugin on the Env's own
// bridge, without a gateway address or masquerading, so that no sysctl
// (ip_forward) and no iptables rule of the host is touched, with
// host-local IPAM keeping its state in the Env's directory. The subnet is
// picked from the Env's id; nothing is routed to it from the host.
func (c *Containerd) cniConfig(id string) string {
	var third byte
	if len(id) >= 2 {
		fmt.Sscanf(id[:2], "%02x", &third)
	}
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": %q,
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": false,
    "ipMasq": false,
    "hairpinMode": false,
    "ipam": {
      "type": "host-local",
      "ranges": [[{"subnet": "10.%d.%d.0/24"}]],
      "dataDir": %q
    }
  }]
}
`, c.Network, c.Bridge, c.flavor.octet, third, filepath.Join(c.Dir, "cni/ipam"))
}

// start runs containerd and waits until its CRI service answers.
func (c *Containerd) start() error {
	// Appended to: a restarted containerd keeps the first one's log.
	logf, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("containerd: %w", err)
	}
	defer logf.Close()
	c.cmd = exec.Command(c.bin, "--config", c.Config)
	if c.netns != "" {
		// nsenter enters the namespace and execs containerd: the
		// process started is containerd's.
		c.cmd = exec.Command("nsenter", "--net="+c.netns, "--", c.bin, "--config", c.Config)
	}
	if c.flavor.path != "" {
		c.cmd.Env = append(os.Environ(), "PATH="+c.flavor.path)
	}
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	// Its own process group: a ^C to the test does not reach it first.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.cmd.Start(); err != nil {
		return fmt.Errorf("containerd: start %s: %w", c.bin, err)
	}
	c.exited = make(chan struct{})
	go func() { c.waitErr = c.cmd.Wait(); close(c.exited) }()

	conn, err := grpc.NewClient("unix://"+c.Address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("containerd: dial %s: %w", c.Address, err)
	}
	c.conn = conn
	c.Runtime = runtimeapi.NewRuntimeServiceClient(conn)
	c.Image = runtimeapi.NewImageServiceClient(conn)

	deadline := time.Now().Add(startupTimeout)
	var notReady string
	for {
		select {
		case <-c.exited:
			return fmt.Errorf("containerd exited during start: %v", c.waitErr)
		default:
		}
		if _, err := os.Stat(c.Address); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			v, err := c.Runtime.Version(ctx, &runtimeapi.VersionRequest{})
			cancel()
			if err == nil && v.RuntimeName != "" {
				ready, why, err := c.status()
				if err == nil && ready {
					return nil
				}
				notReady = why
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd: CRI not ready on %s within %v: %s", c.Address, startupTimeout, notReady)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Restart kills containerd with SIGKILL, as a crash or an OOM kill would,
// and starts it again on the same configuration, root and state, as a
// service manager would. The shims and their containers run on meanwhile
// (they are not containerd's children); Runtime and Image are new clients
// on the restarted daemon. It is for one test at a time: the package's
// other tests must not be using this containerd meanwhile.
func (c *Containerd) Restart() error {
	if c.cmd == nil || c.exited == nil {
		return errors.New("runtimetest: containerd is not running")
	}
	if err := c.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("runtimetest: kill containerd: %w", err)
	}
	<-c.exited
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
	return c.start()
}

// status reports whether the CRI says the runtime and its network are
// ready, and if not, why. Other conditions (containerd 2.x's
// ContainerdHasNoDeprecationWarnings, false on a cgroup v1 host) are
// informational, as they are to kubelet.
func (c *Containerd) status() (bool, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := c.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return false, "", err
	}
	for _, cond := range st.GetStatus().GetConditions() {
		if (cond.Type == runtimeapi.RuntimeReady || cond.Type == runtimeapi.NetworkReady) && !cond.Status {
			return false, fmt.Sprintf("%s: %s: %s", cond.Type, cond.Reason, cond.Message), nil
		}
	}
	return true, "", nil
}

// withLog appends the tail of containerd's log to err.
func (c *Containerd) withLog(err error) error {
	return fmt.Errorf("%w\ncontainerd log (%s), last lines:\n%s", err, c.logPath, tail(c.logPath, 30))
}

// Log returns the tail of containerd's log, for a failing test's output.
func (c *Containerd) Log() string { return tail(c.logPath, 60) }

func tail(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	ls := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// Ctr returns a command running ctr against this containerd in the CRI
// namespace, e.g. c.Ctr("images", "ls").
func (c *Containerd) Ctr(args ...string) *exec.Cmd {
	return exec.Command(c.ctr, append([]string{"--address", c.Address, "--namespace", CRINamespace}, args...)...)
}

// Crictl returns a command running crictl (gating t on it) against this
// containerd's CRI endpoint, e.g. c.Crictl(t, "ps", "-a"). Its config file
// is the Env's own, never the machine's /etc/crictl.yaml.
func (c *Containerd) Crictl(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	bin := Crictl(t)
	return exec.Command(bin, append([]string{"--config", c.crictlConfig()}, args...)...)
}

// RuntimeRoot returns the state root (--root) that containerd's shim passes
// to runc or crun for the runtime handler, e.g. to run `runc --root R
// state ID` on a CRI container: the handler's configured Root plus the
// namespace (runtime/v2/runc: the shim appends it).
func (c *Containerd) RuntimeRoot(handler string) string {
	return filepath.Join(c.Dir, handler, CRINamespace)
}

// crictlConfig returns the path of a crictl.yaml naming this containerd.
func (c *Containerd) crictlConfig() string {
	return filepath.Join(c.Dir, "crictl.yaml")
}

// shimSocket is where containerd 1.6 puts the socket of the shim serving
// the task group id (runtime/v2/shim.SocketAddress): a sha256 of the
// containerd address, the namespace and the id, under /run/containerd/s.
func (c *Containerd) shimSocket(id string) string {
	sum := sha256.Sum256([]byte(filepath.Join(c.Address, CRINamespace, id)))
	return filepath.Join(shimSocketDir, fmt.Sprintf("%x", sum))
}

// close removes what is left, stops containerd and cleans the host.
func (c *Containerd) close() error {
	var errs []error
	if c.conn != nil {
		if c.cmd != nil && c.cmd.ProcessState == nil {
			errs = append(errs, c.removeAll())
		}
		errs = append(errs, c.conn.Close())
	}
	if c.cmd != nil && c.exited != nil {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exited:
		case <-time.After(30 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.exited
			errs = append(errs, fmt.Errorf("runtimetest: containerd did not exit on SIGTERM within 30s"))
		}
	}
	// Shims are started with the containerd address as an argument.
	errs = append(errs, killProcessesWith(c.Address, "containerd shims"))
	errs = append(errs, unmountUnder(c.Dir))
	if link, err := netlink.LinkByName(c.Bridge); err == nil {
		if err := netlink.LinkDel(link); err != nil {
			errs = append(errs, fmt.Errorf("runtimetest: delete bridge %s: %w", c.Bridge, err))
		}
	}
	if ents, err := os.ReadDir(cniResultsDir); err == nil {
		for _, ent := range ents {
			if strings.HasPrefix(ent.Name(), c.Network+"-") {
				_ = os.Remove(filepath.Join(cniResultsDir, ent.Name()))
			}
		}
	}
	var socks []string
	for id := range c.sandbox {
		if c.flavor.v2 {
			break // its sockets are in c.Dir
		}
		if s := c.shimSocket(id); existed(s) {
			socks = append(socks, s)
			_ = os.Remove(s)
		}
	}
	if len(socks) > 0 {
		errs = append(errs, fmt.Errorf("runtimetest: removed %d shim sockets left in %s", len(socks), shimSocketDir))
	}
	// Deepest first; a directory someone else uses meanwhile is not empty
	// and stays.
	for i := len(c.hostDirs) - 1; i >= 0; i-- {
		_ = os.Remove(c.hostDirs[i])
	}
	return errors.Join(errs...)
}

// removeAll stops and removes every pod and container left, and returns an
// error naming them: tests remove their own through t.Cleanup.
func (c *Containerd) removeAll() error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var errs []error
	ctrs, err := c.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return fmt.Errorf("runtimetest: list containers: %w", err)
	}
	pods, err := c.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("runtimetest: list pods: %w", err)
	}
	for _, ctr := range ctrs.Containers {
		_, _ = c.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: ctr.Id})
		if _, err := c.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: ctr.Id}); err != nil {
			errs = append(errs, fmt.Errorf("remove container %s: %w", ctr.Id, err))
		}
	}
	for _, p := range pods.Items {
		_, _ = c.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id})
		if _, err := c.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			errs = append(errs, fmt.Errorf("remove pod %s: %w", p.Id, err))
		}
	}
	if n := len(ctrs.Containers) + len(pods.Items); n > 0 {
		errs = append([]error{fmt.Errorf("runtimetest: %d containers and %d pods were left behind", len(ctrs.Containers), len(pods.Items))}, errs...)
	}
	return errors.Join(errs...)
}
