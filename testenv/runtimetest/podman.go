package runtimetest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// Podman runs podman on private storage (see the package doc).
type Podman struct {
	// Dir holds the storage root, runroot, tmpdir, configs and logs.
	Dir string
	// Root and RunRoot are the storage graph root and run root.
	Root, RunRoot string
	// Conf is the containers.conf every command reads (CONTAINERS_CONF).
	Conf string
	// CgroupParent is the cgroup parent of every container and its conmon.
	CgroupParent string

	bin      string
	runtimes map[string]string // --runtime paths by name
	hostDirs []string          // host directories that did not exist at start
	tmpDir   string
	storage  string // storage.conf (CONTAINERS_STORAGE_CONF)
}

// podmanHostDirs are what podman 4.3 creates on the host whatever its
// flags: runc's and crun's default state roots (conmon's exit command,
// `podman container cleanup`, does not carry --runtime-flag, so the
// runtimes keep their default --root), and containers/image's blob info
// cache (/var/lib/containers/cache/blob-info-cache-v1.boltdb for root,
// not under --root). Close removes those the Env created.
var podmanHostDirs = []string{"/run/runc", "/run/crun", "/var/lib/containers", "/var/lib/containers/cache"}

// Podman returns the Env's podman, setting up its storage and loading
// BusyboxImage on first use. It gates t on root and podman, conmon, runc
// and crun.
func (e *Env) Podman(t testing.TB) *Podman {
	t.Helper()
	testutil.RequireRoot(t)
	bin := testutil.RequireTool(t, EnvPodman, "podman")
	testutil.RequireBinary(t, "conmon")
	runtimes := map[string]string{
		RuntimeRunc: testutil.RequireBinary(t, RuntimeRunc),
		RuntimeCrun: testutil.RequireBinary(t, RuntimeCrun),
	}
	unshare := testutil.RequireBinary(t, "unshare")
	img := e.Images(t)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.podman == nil && e.podmanErr == nil {
		e.podman, e.podmanErr = e.startPodman(bin, runtimes, unshare, img)
	}
	if e.podmanErr != nil {
		t.Fatal(e.podmanErr)
	}
	return e.podman
}

// hardLimit returns the hard limit of resource, capped at max: podman's
// default ulimits must not exceed the limit the runtime inherits (raising a
// hard limit needs CAP_SYS_RESOURCE, which this machine does not give).
// The cap is lower than the test's own limits: somewhere in podman 4.3's
// chain to runc the hard RLIMIT_NPROC drops to 32768 (runc's setrlimit of
// 32769 fails with EPERM where the test's own hard limit is 96365).
func hardLimit(resource int, max uint64) uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(resource, &rl); err != nil || rl.Max > max {
		return max
	}
	return rl.Max
}

// rlimitNproc is RLIMIT_NPROC (not in package syscall).
const rlimitNproc = 6

func (e *Env) startPodman(bin string, runtimes map[string]string, unshare string, img *Images) (*Podman, error) {
	if err := e.setup(); err != nil {
		return nil, err
	}
	crun, err := crunPath(e.dir, runtimes[RuntimeCrun], unshare)
	if err != nil {
		return nil, err
	}
	runtimes[RuntimeCrun] = crun
	dir := filepath.Join(e.dir, "podman")
	p := &Podman{
		Dir:          dir,
		Root:         filepath.Join(dir, "root"),
		RunRoot:      filepath.Join(dir, "run"),
		Conf:         filepath.Join(dir, "containers.conf"),
		CgroupParent: "/nsrt-" + e.id + "/podman",
		bin:          bin,
		runtimes:     runtimes,
		tmpDir:       filepath.Join(dir, "tmp"),
		storage:      filepath.Join(dir, "storage.conf"),
	}
	for _, d := range podmanHostDirs {
		if !existed(d) {
			p.hostDirs = append(p.hostDirs, d)
		}
	}
	for _, d := range []string{p.Root, p.RunRoot, p.tmpDir, filepath.Join(dir, "cni")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("podman: %w", err)
		}
	}
	nofile := hardLimit(syscall.RLIMIT_NOFILE, 4096)
	nproc := hardLimit(rlimitNproc, 4096)
	conf := fmt.Sprintf(`[containers]
default_ulimits = ["nofile=%[1]d:%[1]d", "nproc=%[2]d:%[2]d"]
log_driver = "k8s-file"
netns = "none"

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = %[3]q
tmp_dir = %[4]q
runtime = "runc"

[network]
network_backend = "cni"
network_config_dir = %[5]q
cni_plugin_dirs = [%[6]q]
`, nofile, nproc, filepath.Join(dir, "events.log"), p.tmpDir, filepath.Join(dir, "cni"), cniBinDir)
	if err := os.WriteFile(p.Conf, []byte(conf), 0o600); err != nil {
		return nil, fmt.Errorf("podman: %w", err)
	}
	storage := fmt.Sprintf("[storage]\ndriver = \"overlay\"\ngraphroot = %q\nrunroot = %q\n", p.Root, p.RunRoot)
	if err := os.WriteFile(p.storage, []byte(storage), 0o600); err != nil {
		return nil, fmt.Errorf("podman: %w", err)
	}

	start := time.Now()
	out, err := p.Command("load", "-i", img.Busybox).CombinedOutput()
	if err != nil {
		return p, fmt.Errorf("podman load %s: %w: %s", img.Busybox, err, bytes.TrimSpace(out))
	}
	if err := p.Command("image", "exists", BusyboxImage).Run(); err != nil {
		// Older podman names an OCI archive's image by its ID only.
		loaded := ""
		for _, l := range strings.Split(string(out), "\n") {
			if s, ok := strings.CutPrefix(l, "Loaded image: "); ok {
				loaded = strings.TrimSpace(s)
			}
		}
		if tout, err := p.Command("tag", loaded, BusyboxImage).CombinedOutput(); loaded == "" || err != nil {
			return p, fmt.Errorf("podman load %s gave %q, tagging it %s: %v: %s", img.Busybox, out, BusyboxImage, err, bytes.TrimSpace(tout))
		}
	}
	e.timings.PodmanLoad = time.Since(start)
	return p, nil
}

// RuntimePath returns what podman is given as --runtime for name
// (RuntimeRunc, RuntimeCrun): the binary, or crun's hybrid-layout wrapper.
func (p *Podman) RuntimePath(name string) string { return p.runtimes[name] }

// Command returns a podman command on this private storage and config,
// e.g. p.Command("ps", "-a").
func (p *Podman) Command(args ...string) *exec.Cmd {
	global := []string{
		"--root", p.Root, "--runroot", p.RunRoot, "--tmpdir", p.tmpDir,
		"--cgroup-manager", "cgroupfs", "--events-backend", "file", "--storage-driver", "overlay",
	}
	cmd := exec.Command(p.bin, append(global, args...)...)
	cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+p.Conf, "CONTAINERS_STORAGE_CONF="+p.storage)
	return cmd
}

// RunOptions describe a `podman run`.
type RunOptions struct {
	// Runtime is RuntimeRunc (the default) or RuntimeCrun.
	Runtime string
	// Seccomp is the path of a seccomp profile (--security-opt
	// seccomp=PATH); empty means podman's default profile.
	Seccomp string
	// Name names the container; Detach runs it in the background (stdout
	// is then its ID) and without --rm.
	Name   string
	Detach bool
	// Flags are more `podman run` flags.
	Flags []string
	// Image defaults to BusyboxImage; Command to the image's.
	Image   string
	Command []string
}

// Result is the outcome of a command.
type Result struct {
	Stdout, Stderr string
	ExitCode       int
}

// Run runs a container (`podman run --network none`, and --rm unless
// detached) and returns its output and exit code. A detached container is
// removed when t ends. It fails t only when podman could not run the
// command at all; a container's own non-zero exit is in the Result.
func (p *Podman) Run(t testing.TB, opts RunOptions) Result {
	t.Helper()
	if opts.Runtime == "" {
		opts.Runtime = RuntimeRunc
	}
	if opts.Image == "" {
		opts.Image = BusyboxImage
	}
	runtime, ok := p.runtimes[opts.Runtime]
	if !ok {
		t.Fatalf("podman: unknown runtime %q", opts.Runtime)
	}
	args := []string{"--runtime", runtime, "run", "--network", "none", "--cgroup-parent", p.CgroupParent}
	if opts.Detach {
		args = append(args, "--detach")
	} else {
		args = append(args, "--rm")
	}
	if opts.Name != "" {
		args = append(args, "--name", opts.Name)
	}
	if opts.Seccomp != "" {
		args = append(args, "--security-opt", "seccomp="+opts.Seccomp)
	}
	args = append(append(append(args, opts.Flags...), opts.Image), opts.Command...)
	cmd := p.Command(args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := Result{Stdout: stdout.String(), Stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		res.ExitCode = exit.ExitCode()
	case err != nil:
		t.Fatalf("podman %s: %v", strings.Join(args, " "), err)
	}
	if opts.Detach && res.ExitCode == 0 {
		id := strings.TrimSpace(res.Stdout)
		t.Cleanup(func() {
			if out, err := p.Command("rm", "--force", "--time", "0", id).CombinedOutput(); err != nil {
				t.Errorf("podman rm %s: %v: %s", id, err, bytes.TrimSpace(out))
			}
		})
	}
	return res
}

// close removes every container left and cleans the host.
func (p *Podman) close() error {
	var errs []error
	out, err := p.Command("ps", "--all", "--quiet").Output()
	if err != nil {
		errs = append(errs, fmt.Errorf("runtimetest: podman ps: %w", err))
	} else if ids := strings.Fields(string(out)); len(ids) > 0 {
		errs = append(errs, fmt.Errorf("runtimetest: %d podman containers were left behind: %s", len(ids), strings.Join(ids, " ")))
		if out, err := p.Command(append([]string{"rm", "--force", "--time", "0"}, ids...)...).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("runtimetest: podman rm: %w: %s", err, bytes.TrimSpace(out)))
		}
	}
	// conmon and podman's cleanup processes carry --root ROOT; the exit
	// command of a container just removed may still be on its way out.
	waitProcessesGone(p.Root, 10*time.Second)
	errs = append(errs, killProcessesWith(p.Root, "podman processes"))
	// containers/storage's overlay driver keeps its home bind-mounted
	// (private propagation) while the store is in use; that one is
	// expected, anything else under the directory is a leak.
	home := filepath.Join(p.Root, "overlay")
	_ = syscall.Unmount(home, syscall.MNT_DETACH)
	errs = append(errs, unmountUnder(p.Dir))
	for i := len(p.hostDirs) - 1; i >= 0; i-- {
		if p.hostDirs[i] == "/var/lib/containers/cache" {
			_ = os.Remove(filepath.Join(p.hostDirs[i], "blob-info-cache-v1.boltdb"))
		}
		_ = os.Remove(p.hostDirs[i]) // only when empty
	}
	return errors.Join(errs...)
}
