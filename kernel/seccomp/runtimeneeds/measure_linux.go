package runtimeneeds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nodeshim/nodeshim/bpf"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/kernel/seccomp"
)

// Options tune a measurement.
type Options struct {
	// WorkDir is where the trivial container's bundle and the runtime's
	// state root are made (a temporary directory under it, removed
	// afterwards); empty means os.TempDir().
	WorkDir string
	// CgroupParent is the cgroup under which the runtime creates the
	// trivial container's cgroup (its cgroupsPath is
	// CgroupParent/ID); empty means the hierarchy's root. The runtime
	// removes the container's cgroup, not the parent.
	CgroupParent string
}

// sigreturn is the name under which a profile allows the return from a
// signal handler on every architecture nodeshim records.
const sigreturn = "rt_sigreturn"

// ErrNoFilterLoad is returned, wrapped, when the runtime ran the trivial
// container without loading a seccomp filter before its execve: a runtime
// built without seccomp support, or one that loads it in another process.
var ErrNoFilterLoad = errdefs.New(errdefs.ErrNotSupported, "the runtime loaded no seccomp filter before it executed the container's process")

// For returns the needs of the runtime id: kept in c when they were
// measured before (cached is then true), else measured now and kept. A
// nil c measures every time; a kept file that cannot be read is measured
// over.
func For(ctx context.Context, c *Cache, id Identity, opts Options) (needs *Needs, cached bool, err error) {
	if c != nil {
		needs, err := c.Load(id)
		if err == nil {
			return needs, true, nil
		}
		if !errors.Is(err, errdefs.ErrNotFound) && !errors.Is(err, errdefs.ErrInvalidArgument) {
			return nil, false, err
		}
	}
	if needs, err = Measure(ctx, id, opts); err != nil {
		return nil, false, err
	}
	if c != nil {
		if err := c.Store(needs); err != nil {
			return nil, false, err
		}
	}
	return needs, false, nil
}

// Measure runs a trivial container with the runtime id twice, without and
// with no_new_privileges, under a seccomp filter that allows every
// syscall, and returns the union of the syscalls that the processes which
// loaded a filter made from the load to their execve, in rounds until they
// add nothing, and rt_sigreturn when the init loaded its filter with
// signal handlers installed (bpf.Recorder's
// FromFilterLoad window, over the process tree of nodeshim itself, which
// the runtime and its init are part of).
func Measure(ctx context.Context, id Identity, opts Options) (*Needs, error) {
	exe, err := nativeExitBinary()
	if err != nil {
		return nil, err
	}
	arch, err := seccomp.SCMPArch(runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	work := opts.WorkDir
	if work == "" {
		work = os.TempDir()
	}
	dir, err := os.MkdirTemp(work, "nodeshim-runtime-needs-")
	if err != nil {
		return nil, fmt.Errorf("runtime needs: %w", err)
	}
	defer os.RemoveAll(dir)

	// The runtime's init is a Go program (runc) or a C one (crun): a Go
	// runtime's own syscalls in the window (futex, nanosleep, mmap) come
	// and go with scheduling, so the container is run in rounds until
	// stableRounds rounds in a row add nothing.
	seen := map[string]bool{}
	needs := &Needs{Runtime: id}
	quiet := 0
	for round := 0; round < maxRounds && (round < minRounds || quiet < stableRounds); round++ {
		added := false
		for i, nnp := range []bool{false, true} {
			cid := fmt.Sprintf("nodeshim-runtime-needs-%d-%d-%d", os.Getpid(), round, i)
			bundle := filepath.Join(dir, cid)
			cg := path.Join("/", opts.CgroupParent, cid)
			if err := writeBundle(bundle, exe, trivialSpec(cg, arch, nnp)); err != nil {
				return nil, err
			}
			names, handlers, err := measureRun(ctx, id, filepath.Join(dir, "state"), bundle, cid)
			if err != nil {
				return nil, fmt.Errorf("measure %s (no_new_privileges %t): %w", id, nnp, err)
			}
			if handlers {
				needs.SignalHandlers = true
				names = append(names, sigreturn)
			}
			for _, n := range names {
				if !seen[n] {
					seen[n] = true
					added = true
				}
			}
			needs.Runs++
		}
		if added {
			quiet = 0
		} else {
			quiet++
		}
	}
	for n := range seen {
		needs.Syscalls = append(needs.Syscalls, n)
	}
	slices.Sort(needs.Syscalls)
	needs.Measured = time.Now().UTC()
	return needs, nil
}

// The rounds of a measurement: at least minRounds, at most maxRounds, and
// done once stableRounds in a row found nothing new.
// runc 1.1's init shows tgkill (Go's preemption) in a few runs in a
// hundred here, not in every measurement even of 16 runs.
const (
	minRounds    = 8
	stableRounds = 4
	maxRounds    = 24
)

// measureRun runs the bundle with the runtime under the recorder and
// returns the names counted in the window, and whether a process loaded
// its filter with signal handlers installed.
func measureRun(ctx context.Context, id Identity, state, bundle, cid string) ([]string, bool, error) {
	target := bpf.ProcessTreeTarget(uint32(os.Getpid()))
	target.FromFilterLoad = true
	rec, err := bpf.NewRecorder(target)
	if err != nil {
		return nil, false, err
	}
	defer rec.Close()

	runErr := createStartWait(ctx, id.Path, state, bundle, cid)
	counts, err := rec.Counts()
	handlers, herr := rec.HandlersAtFilterLoad()
	if cerr := rec.Close(); err == nil {
		err = errors.Join(herr, cerr)
	}
	if runErr != nil {
		return nil, false, runErr
	}
	if err != nil {
		return nil, false, err
	}
	names := bpf.AllowedNames(bpf.NameCounts(counts))
	if !slices.Contains(names, "execve") && !slices.Contains(names, "execveat") {
		return nil, false, ErrNoFilterLoad
	}
	return names, handlers, nil
}

// createStartWait runs the container as podman's conmon and containerd's
// shim do: "create", then "start", then waits for it to stop and deletes
// it. The init waits for the start under its filter (runc: on the exec
// fifo; crun: read and pselect6 on its sync socket), which "run" skips in
// crun. The runtime's output goes to a file, not a pipe: the container's
// process inherits it and outlives "create".
func createStartWait(ctx context.Context, bin, state, bundle, cid string) (err error) {
	logPath := filepath.Join(bundle, "runtime.log")
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("runtime needs: %w", err)
	}
	defer logFile.Close()
	runtime := func(args ...string) error {
		cmd := exec.CommandContext(ctx, bin, append([]string{"--root", state}, args...)...)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		if err := cmd.Run(); err != nil {
			out, _ := os.ReadFile(logPath)
			return fmt.Errorf("%s %s: %w: %s", bin, args[0], err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := runtime("create", "--bundle", bundle, cid); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// What a failed step left behind goes.
			exec.Command(bin, "--root", state, "delete", "--force", cid).Run()
		}
	}()
	if err := runtime("start", cid); err != nil {
		return err
	}
	// The exit binary exits at once; the runtime reports the container
	// stopped once its init has gone.
	for {
		out, err := exec.CommandContext(ctx, bin, "--root", state, "state", cid).Output()
		if err != nil {
			return fmt.Errorf("%s state %s: %w", bin, cid, err)
		}
		var st struct {
			Status string `json:"status"`
		}
		if err := json.Unmarshal(out, &st); err != nil {
			return fmt.Errorf("%s state %s: %w", bin, cid, err)
		}
		if st.Status == "stopped" {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return runtime("delete", cid)
}

// defaultCaps is the capability set that podman and containerd give a
// container by default: a runtime drops the rest, and without
// no_new_privileges does so after loading the filter.
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_NET_BIND_SERVICE",
	"CAP_SETFCAP", "CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID", "CAP_SYS_CHROOT",
}

// trivialSpec is the OCI runtime spec of the measurement's container: the
// exit binary as root with the default capabilities, the namespaces and
// mounts of an ordinary container, and a filter that allows everything
// (a denied syscall never reaches the recorder's tracepoint).
func trivialSpec(cgroupsPath, arch string, nnp bool) *specs.Spec {
	caps := slices.Clone(defaultCaps)
	return &specs.Spec{
		Version:  "1.0.2",
		Root:     &specs.Root{Path: "rootfs", Readonly: true},
		Hostname: "nodeshim-runtime-needs",
		Process: &specs.Process{
			Args:            []string{"/exit"},
			Cwd:             "/",
			Env:             []string{"PATH=/"},
			NoNewPrivileges: nnp,
			Capabilities:    &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps},
			Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}},
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace},
			},
			CgroupsPath:   cgroupsPath,
			MaskedPaths:   []string{"/proc/kcore", "/proc/keys"},
			ReadonlyPaths: []string{"/proc/sys", "/proc/sysrq-trigger"},
			Seccomp: &specs.LinuxSeccomp{
				DefaultAction: specs.ActAllow,
				Architectures: []specs.Arch{specs.Arch(arch)},
			},
		},
	}
}

// writeBundle makes an OCI bundle at dir: config.json and a rootfs that
// holds the exit binary and the mount points.
func writeBundle(dir string, exe []byte, spec *specs.Spec) error {
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"proc", "dev"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return fmt.Errorf("runtime needs bundle: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(rootfs, "exit"), exe, 0o755); err != nil {
		return fmt.Errorf("runtime needs bundle: %w", err)
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("encode runtime needs spec: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600); err != nil {
		return fmt.Errorf("runtime needs bundle: %w", err)
	}
	return nil
}
