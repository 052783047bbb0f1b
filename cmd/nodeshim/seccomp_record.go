package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/bpf"
	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/internal/atomicfile"
	"github.com/nodeshim/nodeshim/kernel/seccomp"
	"github.com/nodeshim/nodeshim/kernel/seccomp/runtimeneeds"
	"github.com/nodeshim/nodeshim/runtimes/cri"
	"github.com/nodeshim/nodeshim/shim/config"
)

// recordFlags are the flags of `nodeshim seccomp record`.
type recordFlags struct {
	outFile  string
	base     string
	cgroup   string
	pid      int
	duration time.Duration
	procRoot string
	sysRoot  string

	// A container by the OCI runtime's id.
	containerID string
	runtime     string
	runtimeRoot string
	// A container by its Kubernetes names, through CRI.
	namespace, pod, container string
	runtimeEndpoint           string

	// Every replica of the pod's workload, each recorded.
	replicas bool

	// What the runtime's init does under the container's filter.
	runtimeNeeds bool
	cacheDir     string
}

// defaultRuntimeNeedsCache is where the measured needs of the node's
// runtimes are kept between runs: they hold across boots (a measurement
// names its kernel release), unlike the report's per-boot cache.
const defaultRuntimeNeedsCache = "/var/lib/nodeshim/runtime-needs"

// containerMode says whether f names a container to record.
func (f *recordFlags) containerMode() bool { return f.containerID != "" || f.pod != "" }

const recordLong = `Record, with an eBPF program on the raw_syscalls/sys_enter tracepoint, every
syscall that a workload makes, and write an OCI seccomp profile that allows
exactly those (by name, for this machine's architecture) and denies every
other syscall with EPERM (defaultAction SCMP_ACT_ERRNO). With --base the
recorded syscalls are added to an existing profile (a union; a syscall that
the base profile handles unconditionally with another action, such as
SCMP_ACT_KILL_PROCESS or SCMP_ACT_LOG, keeps it, with a warning).

The workload is one of:
  -- COMMAND    run COMMAND and record it and every process it starts, from
                its first syscall until it exits (it is started directly into
                a fresh cgroup v2 cgroup);
  --cgroup PATH record a running cgroup: its cgroup v2 subtree, or on a hybrid
                host a cgroup v1 path, whose processes and their future
                children are recorded;
  --pid PID     record a running process: its whole mount namespace when it
                runs in one of its own (a container), else its process tree;
  --container-id ID
                record an OCI runtime's container (podman's, or runc's or
                crun's own): its init process is found with
                "RUNTIME [--root ROOT] state ID" (--runtime, --runtime-root),
                and its mount namespace is recorded, which holds every
                process of the container, including those exec'd into it;
  --pod POD --container NAME [--namespace NS]
                record a Kubernetes container through the node's CRI runtime
                (--runtime-endpoint): the running container with kubelet's
                labels for NS/POD/NAME, recorded as --container-id is.
--cgroup, --pid and the container modes record until --duration elapses or
nodeshim is stopped (Ctrl-C, SIGTERM), and a container also until its init
process exits; the profile is written either way, and the programs are
detached.

A container is recorded from the moment nodeshim attaches. What the
runtime's init does in the container between installing the container's
seccomp filter and executing the container's command happened before that,
yet a profile for that container must allow it, or no new container starts
under it (runc: "error closing exec fds: ensure /proc/self/fd is on procfs:
operation not permitted"). So in the container modes the profile also
allows the runtime's needs, measured on this node: nodeshim runs a trivial
container (a static binary that only exits) with the same runtime binary
(--runtime, or the CRI runtime's binary_name), with and without
no_new_privileges, in rounds until nothing new shows, and records what its
init does from the filter load to the execve. The measurement is kept per
runtime binary (path, version, size, modification time) and kernel release
under --cache-dir, so each runtime is measured once. The syscalls that only
the runtime needs are logged and marked "runtime" in the table.
--runtime-needs=false leaves them out.

What the container's command did before nodeshim attached (its own start)
is not seen either: record a container that runs long enough to repeat its
work, or from before its start ("podman container init", "runc create").

Record unconfined: a seccomp filter runs before the tracepoint, so a syscall
that the workload's current filter denies is never seen. A table of the
recorded syscalls and their counts goes to stderr, after the logs: stdout
belongs to the recorded command, so that its output can be redirected and
compared with a run under the profile.`

const recordExample = `  # Record a running podman container, then run a new one under the profile
  nodeshim seccomp record --out-file app.json --container-id $id --duration 1m
  podman run --security-opt seccomp=app.json IMAGE

  # Record a command and its children
  nodeshim seccomp record --out-file /tmp/curl.json -- curl -sI https://example.com

  # Record a running pod's cgroup for 30 seconds on top of a base profile
  nodeshim seccomp record --out-file app.json --base runtime-default.json \
    --cgroup /sys/fs/cgroup/kubepods.slice/kubepods-pod1234.slice --duration 30s

  # Record a running container by the pid of its init process until Ctrl-C
  nodeshim seccomp record --out-file app.json --pid 4242

  # Record a podman container from before its start until it exits
  # (unconfined while recorded; start it once nodeshim logs "recording")
  id=$(podman create --security-opt seccomp=unconfined \
    --security-opt no-new-privileges busybox ls /)
  podman container init $id
  nodeshim seccomp record --out-file ls.json --container-id $id &
  podman start --attach $id

  # Record a pod's container through containerd's CRI for a minute
  nodeshim seccomp record --out-file web.json --namespace shop --pod web-0 --container nginx --duration 1m

  # Record every replica of a Deployment's pod on this node for an hour:
  # one profile, and web.json.replicas.json with each syscall's replicas
  nodeshim seccomp record --out-file web.json --namespace shop --pod web-7d4f8b-x2k9q --container nginx \
    --replicas --duration 1h`

func newSeccompRecordCommand() *cobra.Command {
	var f recordFlags
	cmd := &cobra.Command{
		Use:     "record --out-file PROFILE [--base PROFILE] (-- COMMAND [ARGS...] | --cgroup PATH | --pid PID | --container-id ID | --pod POD --container NAME) [--duration D]",
		Short:   "Record the syscalls of a workload into a seccomp profile",
		Long:    recordLong,
		Example: recordExample,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSeccompRecord(cmd, &f, args)
		},
	}
	f.bind(cmd)
	return cmd
}

func (f *recordFlags) bind(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.outFile, "out-file", "", "where to write the profile (required)")
	// The spelling before -o was the output format on every command;
	// record prints no format but its table on stderr.
	addDeprecatedAlias(fl, "output", "o", "out-file")
	fl.StringVar(&f.base, "base", "", "an OCI seccomp profile to merge the recorded syscalls into")
	fl.StringVar(&f.cgroup, "cgroup", "", "record this running cgroup (a path under the cgroup v2 mount, or a cgroup v1 path)")
	fl.IntVar(&f.pid, "pid", 0, "record this running process (its mount namespace if it has its own, else its process tree)")
	fl.DurationVar(&f.duration, "duration", 0, "with --cgroup, --pid or a container, stop after this long (default: until interrupted, or the container's end)")
	fl.StringVar(&f.containerID, "container-id", "", "record this OCI runtime container (see --runtime, --runtime-root)")
	fl.StringVar(&f.runtime, "runtime", "runc", "the OCI runtime binary that runs the container (runc, crun or a path): with --container-id, the one asked for its state; in both container modes, the one whose needs are measured, unless the CRI runtime names another (binary_name)")
	fl.StringVar(&f.runtimeRoot, "runtime-root", "", "with --container-id, the runtime's state root (its --root; default: the runtime's own)")
	fl.StringVar(&f.namespace, "namespace", "default", "with --pod, the pod's namespace")
	fl.StringVar(&f.pod, "pod", "", "record a container of this pod through CRI (with --container)")
	fl.StringVar(&f.container, "container", "", "with --pod, the container's name")
	fl.BoolVar(&f.replicas, "replicas", false, "with --pod, record the container in every pod of the namespace that the pod's controller owns (its ReplicaSet, StatefulSet or Job, from the labels it sets), one recorder each, and write their union, with PROFILE.replicas.json saying how many replicas made each syscall")
	fl.StringVar(&f.runtimeEndpoint, "runtime-endpoint", config.Defaults().ContainerRuntimeEndpoint, "with --pod, the CRI runtime's socket (ShimConfiguration containerRuntimeEndpoint)")
	fl.BoolVar(&f.runtimeNeeds, "runtime-needs", true, "in the container modes, also allow what the runtime's init does under the container's filter before the container's command, measured on this node")
	fl.StringVar(&f.cacheDir, "cache-dir", defaultRuntimeNeedsCache, "where the measured needs of the node's runtimes are kept; empty to measure every time")
	fl.StringVar(&f.procRoot, "proc-root", "/proc", "where procfs is mounted")
	fl.StringVar(&f.sysRoot, "sys-root", "/sys", "where sysfs is mounted")
}

func runSeccompRecord(cmd *cobra.Command, f *recordFlags, args []string) error {
	modes := 0
	for _, set := range []bool{len(args) > 0, f.cgroup != "", f.pid != 0, f.containerID != "", f.pod != ""} {
		if set {
			modes++
		}
	}
	switch {
	case f.outFile == "":
		return withExitCode(exitUsage, errors.New("--out-file PROFILE is required"))
	case modes != 1:
		return withExitCode(exitUsage, errors.New("give exactly one of -- COMMAND, --cgroup PATH, --pid PID, --container-id ID or --pod POD"))
	case len(args) > 0 && f.duration != 0:
		return withExitCode(exitUsage, errors.New("--duration applies to --cgroup, --pid and containers; a command is recorded until it exits"))
	case f.pod != "" && (f.container == "" || f.namespace == ""):
		return withExitCode(exitUsage, errors.New("--pod needs --container and --namespace"))
	case f.replicas && f.pod == "":
		return withExitCode(exitUsage, errors.New("--replicas needs --pod, --container and --namespace"))
	}
	arch, err := seccomp.SCMPArch(runtime.GOARCH)
	if err != nil {
		return err
	}
	var base *seccomp.Profile
	if f.base != "" {
		data, err := os.ReadFile(f.base)
		if err != nil {
			return fmt.Errorf("read base profile: %w", err)
		}
		if base, err = seccomp.Parse(data, seccomp.NodeParseOptions(nil)); err != nil {
			return fmt.Errorf("base profile %s: %w", f.base, err)
		}
		for _, w := range base.Warnings {
			slog.Warn("seccomp profile", "profile", f.base, "path", w.Path, "warning", w.Message)
		}
	}
	// Fail before recording, not after, when the output cannot be written.
	if _, err := os.Stat(filepath.Dir(f.outFile)); err != nil {
		return fmt.Errorf("output directory: %w", err)
	}

	if f.replicas {
		return recordReplicas(cmd, f, arch, base)
	}
	ctx := cmd.Context()
	var (
		counts []bpf.SyscallCount
		runErr error
	)
	var needs []string
	if len(args) > 0 {
		counts, runErr, err = recordCommand(ctx, f, args)
	} else {
		counts, needs, err = recordRunning(ctx, f)
	}
	if err != nil {
		return err
	}

	named := bpf.NameCounts(counts)
	for _, n := range named {
		if n.Name == "" {
			slog.Warn("recorded a syscall number that has no name on this architecture; it is not in the profile",
				"nr", n.Nr, "count", n.Count)
		}
	}
	recorded := bpf.AllowedNames(named)
	runtimeOnly := slices.DeleteFunc(slices.Clone(needs), func(n string) bool { return slices.Contains(recorded, n) })
	if len(needs) > 0 {
		slog.Info("the profile allows the runtime's needs", "syscalls", len(needs), "runtime-only", strings.Join(runtimeOnly, ","))
	}
	allowed := append(slices.Clone(recorded), runtimeOnly...)
	profile, kept := bpf.BuildProfile(allowed, arch, base)
	for _, name := range kept {
		slog.Warn("the workload used a syscall that the base profile gives another action than allow; the base rule is kept", "syscall", name)
	}
	data, err := bpf.MarshalProfile(profile)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(f.outFile, data, 0o644); err != nil {
		return err
	}
	slog.Info("wrote seccomp profile", "path", f.outFile, "syscalls", len(allowed))
	if err := writeRecordTable(cmd, named, needs); err != nil {
		return err
	}
	if runErr != nil {
		return fmt.Errorf("the recorded command failed (the profile was written): %w", runErr)
	}
	return nil
}

// recordCommand runs args under the recorder. Stopping nodeshim sends
// SIGTERM to the command and the recording ends when it exits.
func recordCommand(ctx context.Context, f *recordFlags, args []string) ([]bpf.SyscallCount, error, error) {
	cg2, err := cgroup.MountUnder(f.sysRoot)
	if err != nil {
		return nil, nil, err
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		return nil, nil, withExitCode(127, fmt.Errorf("command %s: %w", args[0], err))
	}
	c := exec.CommandContext(ctx, path, args[1:]...)
	c.Args[0] = args[0]
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	c.Cancel = func() error { return c.Process.Signal(syscall.SIGTERM) }
	slog.Info("recording", "command", args, "cgroup2", cg2)
	return bpf.RecordCommand(cg2, c)
}

// recordRunning records a running cgroup, process or container until the
// duration elapses, ctx is cancelled or the container's init exits. For a
// container it also returns its runtime's needs (runtimeneeds), unless
// --runtime-needs=false.
func recordRunning(ctx context.Context, f *recordFlags) ([]bpf.SyscallCount, []string, error) {
	var (
		target bpf.Target
		needs  []string
		err    error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // also ends the watch of a container's init
	if f.containerMode() {
		var (
			pid int
			bin string
		)
		if pid, bin, err = containerPID(ctx, f); err != nil {
			return nil, nil, err
		}
		// Measured before the recording starts: a runtime that
		// cannot be measured fails the command before anything is
		// recorded.
		if f.runtimeNeeds {
			if needs, err = runtimeNeeds(ctx, f, bin); err != nil {
				return nil, nil, err
			}
		}
		target, err = watchedContainer(ctx, cancel, f.procRoot, pid)
	} else if f.pid != 0 {
		target, err = bpf.PIDTarget(f.procRoot, f.pid)
	} else {
		var cg2 string
		if cg2, err = cgroup.MountUnder(f.sysRoot); err == nil {
			target, err = bpf.CgroupPathTarget(cg2, f.cgroup)
		}
	}
	if err != nil {
		return nil, nil, err
	}
	rec, err := bpf.NewRecorder(target)
	if err != nil {
		return nil, nil, err
	}
	defer rec.Close()
	if target.Kind == bpf.TargetProcessTree {
		// Processes forked between the scan and the attachment are only
		// seen by a second scan.
		if err := rec.AddDescendants(f.procRoot); err != nil {
			return nil, nil, err
		}
	}
	slog.Info("recording", "target", target.Kind.String(), "keys", len(target.Keys), "duration", f.duration)
	if f.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.duration)
		defer cancel()
	}
	<-ctx.Done()
	counts, err := rec.Counts()
	if err != nil {
		return nil, nil, err
	}
	return counts, needs, rec.Close()
}

// runtimeNeeds returns what the runtime binary's container init does under
// the container's filter: kept under --cache-dir, or measured now.
func runtimeNeeds(ctx context.Context, f *recordFlags, bin string) ([]string, error) {
	id, err := runtimeneeds.Identify(ctx, bin)
	if err != nil {
		return nil, err
	}
	var cache *runtimeneeds.Cache
	if f.cacheDir != "" {
		cache = &runtimeneeds.Cache{Dir: f.cacheDir}
	}
	needs, cached, err := runtimeneeds.For(ctx, cache, id, runtimeneeds.Options{})
	if err != nil {
		return nil, fmt.Errorf("the needs of runtime %s (--runtime-needs=false records without them): %w", id, err)
	}
	slog.Info("runtime needs", "runtime", id.Path, "version", id.Version, "kept", cached,
		"measured", needs.Measured.Format(time.RFC3339), "runs", needs.Runs, "syscalls", strings.Join(needs.Syscalls, ","))
	return needs.Syscalls, nil
}

// containerPID finds the init process of the container that f names, and
// the OCI runtime binary that runs it: --runtime, or for a CRI container
// the binary_name of its runtime options when the CRI runtime reports one
// (containerd's runc shim options), else --runtime.
func containerPID(ctx context.Context, f *recordFlags) (pid int, bin string, err error) {
	if f.containerID != "" {
		pid, err := cri.OCIStatePID(ctx, f.runtime, f.runtimeRoot, f.containerID)
		if err != nil {
			return 0, "", err
		}
		slog.Info("container", "id", f.containerID, "runtime", f.runtime, "pid", pid)
		return pid, f.runtime, nil
	}
	r, err := cri.Dial(f.runtimeEndpoint)
	if err != nil {
		return 0, "", err
	}
	defer r.Close()
	target := cri.Target{Namespace: f.namespace, Pod: f.pod, Container: f.container}
	p, err := r.Resolve(ctx, target)
	if err != nil {
		return 0, "", err
	}
	bin = f.runtime
	if f.runtimeNeeds {
		st, err := r.Client().ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: p.ContainerID, Verbose: true})
		if err != nil {
			return 0, "", fmt.Errorf("container status of %s (%s): %w", target, p.ContainerID, err)
		}
		name, err := runtimeBinaryFromVerboseInfo(st.GetInfo())
		if err != nil {
			return 0, "", fmt.Errorf("container %s (%s): %w", target, p.ContainerID, err)
		}
		if name != "" {
			bin = name
		}
	}
	slog.Info("container", "name", target.String(), "id", p.ContainerID, "pid", p.PID, "runtime", bin)
	return p.PID, bin, nil
}

// runtimeBinaryFromVerboseInfo reads the OCI runtime binary from CRI
// ContainerStatus verbose info: runtimeOptions.binary_name of the "info"
// JSON object, as containerd reports its runc shim's options. Empty when
// there is none (the shim then runs "runc" from its PATH).
func runtimeBinaryFromVerboseInfo(info map[string]string) (string, error) {
	raw, ok := info["info"]
	if !ok {
		return "", nil
	}
	var v struct {
		RuntimeOptions *struct {
			BinaryName string `json:"binary_name"`
		} `json:"runtimeOptions"`
	}
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return "", fmt.Errorf("decode verbose info: %w", err)
	}
	if v.RuntimeOptions == nil {
		return "", nil
	}
	return v.RuntimeOptions.BinaryName, nil
}

// watchedContainer returns the Target that records the container whose init
// is pid, and calls stop when that process exits: its exit ends every
// process of the container's pid namespace.
func watchedContainer(ctx context.Context, stop context.CancelFunc, procRoot string, pid int) (bpf.Target, error) {
	exited, err := whenExited(ctx, pid)
	if err != nil {
		return bpf.Target{}, err
	}
	go func() {
		select {
		case <-exited:
			slog.Info("the container's init process exited", "pid", pid)
			stop()
		case <-ctx.Done():
		}
	}()
	return bpf.PIDTarget(procRoot, pid)
}

// whenExited returns a channel closed when process pid has exited, watched
// through a pidfd (pidfd_open, 5.3+; it polls readable once the process
// has exited), so that a recycled pid is not mistaken for it. The watch
// ends with ctx.
func whenExited(ctx context.Context, pid int) (<-chan struct{}, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	done := make(chan struct{})
	go func() {
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for ctx.Err() == nil {
			// A bounded wait, so that the goroutine ends with ctx.
			n, err := unix.Poll(fds, 200)
			if err != nil && !errors.Is(err, unix.EINTR) {
				slog.Warn("watching the container's init process", "pid", pid, "error", err)
				return
			}
			if n > 0 {
				close(done)
				return
			}
		}
	}()
	return done, nil
}

// writeRecordTable writes the recorded syscalls with their counts, and
// the runtime's needs that the workload was not seen to make, with their
// source: "workload", "runtime" or both.
func writeRecordTable(cmd *cobra.Command, named []bpf.NamedCount, needs []string) error {
	// The table goes to stderr: stdout is the recorded command's.
	tw := tabwriter.NewWriter(cmd.ErrOrStderr(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SYSCALL\tNR\tCOUNT\tSOURCE")
	seen := map[string]bool{}
	for _, n := range named {
		name, source := n.Name, "workload"
		if name == "" {
			name = "(unnamed)"
		}
		if slices.Contains(needs, n.Name) {
			source = "workload,runtime"
		}
		seen[n.Name] = true
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", name, n.Nr, n.Count, source)
	}
	for _, name := range needs {
		if seen[name] {
			continue
		}
		nr := "-"
		if n, err := libseccomp.GetSyscallFromName(name); err == nil {
			nr = fmt.Sprint(int32(n))
		}
		fmt.Fprintf(tw, "%s\t%s\t0\truntime\n", name, nr)
	}
	return tw.Flush()
}
