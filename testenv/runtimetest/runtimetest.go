// Package runtimetest runs real container runtimes for tests: Debian's
// containerd 1.6 with its CRI plugin (runc and crun as runtime handlers) and
// podman (runc or crun), each on private state under a temporary directory,
// with test images built locally (no registry is reachable).
//
// One Env serves a whole test package, so that containerd starts once:
//
//	var rt runtimetest.Env
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		if err := rt.Close(); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			code = 1
//		}
//		os.Exit(code)
//	}
//
//	func TestX(t *testing.T) {
//		c := rt.Containerd(t)          // started on first use
//		pod := c.RunPod(t, runtimetest.PodOptions{})
//		ctr := pod.Run(t, runtimetest.ContainerOptions{Command: []string{"sh", "-c", "echo ok"}})
//		code := ctr.Wait(t)
//		out := ctr.Logs(t)
//		...
//	}
//
// Nothing starts until a test asks: a run of other tests costs nothing.
//
// # Gates
//
// Every accessor gates the calling test through testenv/testutil: root, the
// runtime's binaries (containerd, ctr, runc; podman, conmon; a static
// busybox and gcc for the images). Under NODESHIM_REQUIRE_PRIVILEGED=1, as in
// `make test`, a missing piece fails the test instead of skipping it. A
// runtime that is present but fails to start fails every test that asks for
// it, with the runtime's log.
//
// # Images
//
// BuildImages writes two OCI image layout tars: BusyboxImage, the
// busybox-static binary with a link per applet, and PauseImage, a static
// single-threaded pause compiled from C with gcc -static (it reaps zombies
// and exits on SIGTERM, as Kubernetes' pause). index.json names each image
// with io.containerd.image.name (what `ctr images import` needs) and
// org.opencontainers.image.ref.name (what `podman load` uses). The layers
// are uncompressed with fixed timestamps, so the digests are reproducible.
//
// # containerd
//
// Containerd.Start runs /usr/bin/containerd with a generated config: root,
// state, the gRPC/ttrpc sockets, the CNI configuration and IPAM state all
// under the Env's directory; the CRI plugin with the cgroupfs driver,
// restrict_oom_score_adj = true (this machine gives no CAP_SYS_RESOURCE, so
// runc cannot lower oom_score_adj), netns_mounts_under_state_dir = true,
// PauseImage as the sandbox image, and runc and crun as runtime handlers
// (RuntimeRunc, RuntimeCrun). Pods get a network namespace from the CNI
// bridge plugin on a private bridge named after the Env, without a gateway
// or masquerading (no sysctl, no iptables rule is touched). Pods' cgroups
// live under a per-Env cgroup parent (Containerd.CgroupRoot) in every
// hierarchy. Both images are imported into the k8s.io namespace with ctr.
//
// What containerd 1.6 does not let a config move: its shims' sockets are
// under /run/containerd/s/ (a compiled-in path; 2.x has socket_dir), named
// by a hash that includes the private address, so they never collide with
// a machine's containerd; the CNI plugins' result cache is /var/lib/cni.
// Close removes what the Env left in either. The runtimes' state roots
// (runc --root, crun --root) are Containerd.RuntimeRoot(handler).
//
// # containerd 2.x
//
// Containerd2 runs containerd 2.x (built from the module proxy; see
// mk/runtime.mk) beside the 1.6 peer, on its own directory, sockets, CNI
// bridge and cgroup parent, with the same images and the same Pod and
// Container helpers. Its config (version 3) has no imported drop-ins, the
// shims' sockets under its own directory (socket_dir; nothing goes to
// /run/containerd/s), NRI off, restrict_oom_score_adj, and CRIU enabled
// with restore through CreateContainer (enable_experimental_restore_via_create;
// v2.3 is the last release that has it). CRIU's directory (NODESHIM_CRIU)
// and then the directory of containerd and its shim come first on its
// PATH, so that its shim, and the runc under it, run that CRIU and not
// Debian's 1.6 shim. runc is its only handler: Debian's crun 1.8 refuses
// the OCI spec version 2.3 writes. The CRI's condition
// ContainerdHasNoDeprecationWarnings (false on a cgroup v1 host) is not
// waited for, as kubelet does not.
//
// # crun on a hybrid cgroup layout
//
// crun refuses a hybrid layout whose unified hierarchy has any controller
// ("cgroups in hybrid mode not supported, drop all controllers from
// cgroupv2"), whatever its cgroup manager; this machine's unified hierarchy
// has hugetlb. On such a layout both containerd and podman are given a
// wrapper named crun that runs crun in a private mount namespace where
// /sys/fs/cgroup/unified is unmounted: crun then sees the v1 layout and
// places the container in the v1 hierarchies, as runc does. Nothing of the
// host's mounts changes. On a pure v2 or a v1 layout crun runs as is.
//
// RunPod, Pod.CreateContainer, Container.Start, Exec, Logs, Wait, Stop and
// Remove wrap the CRI calls with kubelet's labels
// (io.kubernetes.pod.{name,namespace,uid}, io.kubernetes.container.name),
// so that code resolving a container by its Kubernetes names finds it.
// Every pod a test runs is stopped and removed when the test ends.
//
// # podman
//
// Podman runs podman 4.3 with a private storage root, runroot, libpod
// tmpdir and containers.conf (CONTAINERS_CONF): cgroupfs under a per-Env
// cgroup parent, file events, k8s-file logs, and default_ulimits within
// this machine's hard limits (without CAP_SYS_RESOURCE runc cannot raise
// RLIMIT_NOFILE/NPROC, and podman's defaults make `runc create` fail).
// Containers run with `--network none`; the OCI runtime is chosen per run.
// BusyboxImage is loaded once with `podman load`. podman 4.3 still creates
// /run/runc and /run/crun (the runtimes' default state roots, used by
// conmon's exit command, which drops --runtime-flag) and its blob info
// cache under /var/lib/containers/cache; Close removes them when the Env
// created them.
//
// # Close
//
// Env.Close removes every pod and container left, stops containerd,
// ends any shim or conmon still running for the Env, unmounts what is left
// mounted under the Env's directory (overlay rootfs, network namespaces,
// podman's storage), removes the Env's cgroups in every hierarchy, the CNI
// bridge and cached results, the shim sockets, and the directory. What it
// had to clean up beyond the runtimes' own removal is returned as an error,
// so that a leak fails the package.
//
// # Tools
//
// The binaries are found as NODESHIM_CONTAINERD, NODESHIM_PODMAN and
// NODESHIM_CRICTL name them, else on PATH; containerd 2.x only in the
// directory NODESHIM_CONTAINERD2 names. mk/runtime.mk installs the Debian
// packages and builds crictl (sigs.k8s.io/cri-tools) and containerd 2.x
// from the Go module proxy into .tools, and exports NODESHIM_CRICTL and
// NODESHIM_CONTAINERD2.
package runtimetest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/testenv/testutil"
	"go.uber.org/goleak"
)

// Environment variables naming the runtimes' binaries.
const (
	EnvContainerd = "NODESHIM_CONTAINERD"
	// EnvContainerd2 names the directory of containerd 2.x's containerd,
	// containerd-shim-runc-v2 and ctr.
	EnvContainerd2 = "NODESHIM_CONTAINERD2"
	EnvPodman      = "NODESHIM_PODMAN"
	EnvCrictl      = "NODESHIM_CRICTL"
)

// OCI runtimes, as containerd runtime handlers and podman --runtime names.
const (
	RuntimeRunc = "runc"
	RuntimeCrun = "crun"
)

// Timings are how long the Env's one-time steps took.
type Timings struct {
	BuildImages     time.Duration
	ContainerdStart time.Duration
	ContainerdLoad  time.Duration // ctr images import of both images
	// Containerd2Start and Containerd2Load are the same for containerd 2.x.
	Containerd2Start time.Duration
	Containerd2Load  time.Duration
	PodmanLoad       time.Duration
}

// Env is a test package's real runtimes, each started on first use and all
// stopped by Close. The zero value is ready to use; an Env must not be
// copied.
type Env struct {
	mu sync.Mutex

	id      string
	dir     string
	dirErr  error
	timings Timings

	images    *Images
	imagesErr error

	containerd    *Containerd
	containerdErr error

	containerd2    *Containerd
	containerd2Err error

	// Handlers2 are runtime handlers added to Containerd2's config beside
	// runc; set them before its first use.
	Handlers2 []Handler
	// Containerd2Dir, when set, is the directory of the containerd 2.x
	// binaries Containerd2 runs instead of NODESHIM_CONTAINERD2's (another
	// 2.x release); set it before the first use.
	Containerd2Dir string
	// NetNS, when set, is the path of the network namespace (a
	// /run/netns file) that Containerd2 runs in, with its shims and CNI
	// bridge: another node's network on this machine. Set it before the
	// first use.
	NetNS string

	podman    *Podman
	podmanErr error
}

// setup creates the Env's directory and id once. Callers hold e.mu.
func (e *Env) setup() error {
	if e.dir != "" || e.dirErr != nil {
		return e.dirErr
	}
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		e.dirErr = fmt.Errorf("runtimetest: %w", err)
		return e.dirErr
	}
	e.id = hex.EncodeToString(b)
	// Short: unix socket paths under it must stay below 108 bytes.
	e.dir, e.dirErr = os.MkdirTemp("", "nsrt-")
	if e.dirErr != nil {
		e.dirErr = fmt.Errorf("runtimetest: %w", e.dirErr)
	}
	return e.dirErr
}

// Timings returns how long the steps done so far took.
func (e *Env) Timings() Timings {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.timings
}

// binary returns the path named by env, else name's path on PATH, gating t.
// Images builds the test images on first use and returns them.
func (e *Env) Images(t testing.TB) *Images {
	t.Helper()
	testutil.RequireRoot(t)
	busybox := testutil.RequireBinary(t, "busybox")
	cc := testutil.RequireBinary(t, "gcc")
	e.mu.Lock()
	defer e.mu.Unlock()
	img, err := e.imagesLocked(busybox, cc)
	if errors.Is(err, errNotStatic) {
		testutil.Skip(t, "%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func (e *Env) imagesLocked(busybox, cc string) (*Images, error) {
	if e.images != nil || e.imagesErr != nil {
		return e.images, e.imagesErr
	}
	if err := e.setup(); err != nil {
		return nil, err
	}
	start := time.Now()
	e.images, e.imagesErr = BuildImages(e.dir, busybox, cc)
	e.timings.BuildImages = time.Since(start)
	return e.images, e.imagesErr
}

// Crictl returns the path of crictl (NODESHIM_CRICTL, else PATH), gating t.
func Crictl(t testing.TB) string {
	t.Helper()
	return testutil.RequireTool(t, EnvCrictl, "crictl")
}

// Main is the TestMain of a package that uses e: it runs the tests, closes
// e (a runtime that left anything on the host fails the package) and, when
// everything passed, fails the package on leaked goroutines (goleak with
// opts). Use it as os.Exit(rt.Main(m)).
func (e *Env) Main(m *testing.M, opts ...goleak.Option) int {
	code := m.Run()
	if err := e.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}

// Close stops whatever the Env started and removes its directory. It
// returns an error naming anything that had to be cleaned up by force.
func (e *Env) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	if e.containerd != nil {
		errs = append(errs, e.containerd.close())
		e.containerd = nil
	}
	if e.containerd2 != nil {
		errs = append(errs, e.containerd2.close())
		e.containerd2 = nil
	}
	if e.podman != nil {
		errs = append(errs, e.podman.close())
		e.podman = nil
	}
	if e.id != "" {
		errs = append(errs, removeCgroups("/nsrt-"+e.id))
	}
	if e.dir != "" {
		errs = append(errs, unmountUnder(e.dir))
		if err := os.RemoveAll(e.dir); err != nil {
			errs = append(errs, fmt.Errorf("runtimetest: %w", err))
		}
		e.dir = ""
	}
	return errors.Join(errs...)
}
