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

	"github.com/nodeshim/nodeshim/internal/testutil"
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

// Containerd returns the Env's containerd, starting it (and importing the
// images) on first use. It gates t on root and the binaries, and fails t
// if containerd did not start.
func (e *Env) Containerd(t testing.TB) *Containerd {
	t.Helper()
	testutil.RequireRoot(t)
	bins := containerdBins{
		containerd: testutil.RequireTool(t, EnvContainerd, "containerd"),
		ctr:        testutil.RequireBinary(t, "ctr"),
		runc:       testutil.RequireBinary(t, RuntimeRunc),
		crun:       testutil.RequireBinary(t, RuntimeCrun),
		unshare:    testutil.RequireBinary(t, "unshare"),
	}
	testutil.RequireBinary(t, "containerd-shim-runc-v2")
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		testutil.RequireFile(t, filepath.Join(cniBinDir, p))
	}
	img := e.Images(t)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.containerd == nil && e.containerdErr == nil {
		e.containerd, e.containerdErr = e.startContainerd(bins, img)
	}
	if e.containerdErr != nil {
		t.Fatal(e.containerdErr)
	}
	return e.containerd
}

// cniBinDir is where Debian's containernetworking-plugins installs.
const cniBinDir = "/usr/lib/cni"

func (e *Env) startContainerd(bins containerdBins, img *Images) (*Containerd, error) {
	if err := e.setup(); err != nil {
		return nil, err
	}
	crun, err := crunPath(e.dir, bins.crun, bins.unshare)
	if err != nil {
		return nil, err
	}
	bins.crun = crun
	dir := filepath.Join(e.dir, "containerd")
	c := &Containerd{
		Dir:        dir,
		Address:    filepath.Join(dir, "containerd.sock"),
		Config:     filepath.Join(dir, "config.toml"),
		CgroupRoot: "/nsrt-" + e.id + "/containerd",
		Network:    "nsrt-" + e.id,
		Bridge:     "nsrt" + e.id,
		bin:        bins.containerd,
		ctr:        bins.ctr,
		logPath:    filepath.Join(dir, "containerd.log"),
		sandbox:    map[string]bool{},
	}
	for _, d := range []string{"/run/containerd", shimSocketDir, "/var/lib/cni", cniResultsDir} {
		if !existed(d) {
			c.hostDirs = append(c.hostDirs, d)
		}
	}
	for _, d := range []string{"root", "state", "opt", "cni/net.d", "cni/ipam", "runc", "crun", "pods"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("containerd: %w", err)
		}
	}
	if err := os.WriteFile(c.Config, []byte(c.configTOML(bins)), 0o600); err != nil {
		return nil, fmt.Errorf("containerd: %w", err)
	}
	crictl := fmt.Sprintf("runtime-endpoint: unix://%[1]s\nimage-endpoint: unix://%[1]s\ntimeout: 60\n", c.Address)
	if err := os.WriteFile(c.crictlConfig(), []byte(crictl), 0o600); err != nil {
		return nil, fmt.Errorf("containerd: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cni/net.d/10-nsrt.conflist"), []byte(c.cniConfig(e.id)), 0o600); err != nil {
		return nil, fmt.Errorf("containerd: %w", err)
	}

	start := time.Now()
	if err := c.start(); err != nil {
		return c, c.withLog(err)
	}
	e.timings.ContainerdStart = time.Since(start)

	start = time.Now()
	for _, tar := range []string{img.Pause, img.Busybox} {
		if out, err := c.Ctr("images", "import", tar).CombinedOutput(); err != nil {
			return c, c.withLog(fmt.Errorf("containerd: ctr images import %s: %w: %s", tar, err, bytes.TrimSpace(out)))
		}
	}
	e.timings.ContainerdLoad = time.Since(start)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	for _, ref := range []string{PauseImage, BusyboxImage} {
		st, err := c.Image.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		if err != nil {
			return c, c.withLog(fmt.Errorf("containerd: CRI image status %s: %w", ref, err))
		}
		if st.Image == nil {
			return c, c.withLog(fmt.Errorf("containerd: CRI does not see the imported image %s", ref))
		}
	}
	return c, nil
}

// configTOML is containerd 1.6's config (version 2) for this instance.
func (c *Containerd) configTOML(bins containerdBins) string {
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	cri := `plugins."io.containerd.grpc.v1.cri"`
	runtime := func(name, binary string) string {
		return fmt.Sprintf(`
[%[1]s.containerd.runtimes.%[2]s]
  runtime_type = "io.containerd.runc.v2"
[%[1]s.containerd.runtimes.%[2]s.options]
  BinaryName = %[3]s
  Root = %[4]s
  SystemdCgroup = false
`, cri, name, q(binary), q(filepath.Join(c.Dir, name)))
	}
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
		runtime(RuntimeRunc, bins.runc) + runtime(RuntimeCrun, bins.crun)
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
      "ranges": [[{"subnet": "10.233.%d.0/24"}]],
      "dataDir": %q
    }
  }]
}
`, c.Network, c.Bridge, third, filepath.Join(c.Dir, "cni/ipam"))
}

// start runs containerd and waits until its CRI service answers.
func (c *Containerd) start() error {
	logf, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("containerd: %w", err)
	}
	defer logf.Close()
	c.cmd = exec.Command(c.bin, "--config", c.Config)
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
				st, err := c.status()
				if err == nil && st {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd: CRI not ready on %s within %v", c.Address, startupTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// status reports whether the CRI says the runtime and its network are ready.
func (c *Containerd) status() (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := c.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return false, err
	}
	for _, cond := range st.GetStatus().GetConditions() {
		if !cond.Status {
			return false, nil
		}
	}
	return true, nil
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
