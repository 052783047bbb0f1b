package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/criu/workentry"
	"github.com/nodeshim/nodeshim/runtimes/podman"
	"github.com/nodeshim/nodeshim/shim/api"
	"github.com/nodeshim/nodeshim/shim/checkpoint"
	"github.com/nodeshim/nodeshim/shim/client"
	"github.com/nodeshim/nodeshim/shim/config"
)

// criuFlags are the CRIU switches shared by checkpoint and restore.
type criuFlags struct {
	path           string
	tcpEstablished bool
	extUnixSk      bool
	fileLocks      bool
	shellJob       bool
	breakpoints    bool
}

func (f *criuFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.path, "criu-path", "", "criu binary to run (default: $"+criu.EnvCriu+", then criu on PATH)")
	cmd.Flags().BoolVar(&f.tcpEstablished, "tcp-established", false, "allow established TCP connections (CRIU --tcp-established)")
	cmd.Flags().BoolVar(&f.extUnixSk, "ext-unix-sk", false, "allow unix sockets connected outside the tree (CRIU --ext-unix-sk)")
	cmd.Flags().BoolVar(&f.fileLocks, "file-locks", false, "allow held file locks (CRIU --file-locks)")
	cmd.Flags().BoolVar(&f.shellJob, "shell-job", false, "allow a tree attached to a terminal session (CRIU --shell-job)")
	cmd.Flags().BoolVar(&f.breakpoints, "hardware-breakpoints", false, "let CRIU use hardware breakpoints (hangs where they do not fire, as in some VMs)")
}

// checkpointOutput is the machine-readable form of `nodeshim checkpoint`.
type checkpointOutput struct {
	Path           string  `json:"path"`
	SizeBytes      int64   `json:"sizeBytes"`
	FrozenSeconds  float64 `json:"frozenSeconds"`
	DumpSeconds    float64 `json:"dumpSeconds"`
	ArchiveSeconds float64 `json:"archiveSeconds"`
	// ServeSeconds is, for --lazy, the time the page server served the
	// memory until the restore had all of it.
	ServeSeconds    float64 `json:"serveSeconds,omitempty"`
	TotalSeconds    float64 `json:"totalSeconds"`
	PagesWritten    uint64  `json:"pagesWritten"`
	Pid             int     `json:"pid"`
	Container       string  `json:"container"`
	RemovedOrphaned int     `json:"removedOrphaned,omitempty"`
	// Image is the checkpoint image written by --image/--image-file.
	Image *checkpointImageOutput `json:"image,omitempty"`
}

// checkpointFlags are the flags of `nodeshim checkpoint`.
type checkpointFlags struct {
	// The target: a process tree, a podman container, or a pod's
	// container through the nodeshim serve on socket.
	pid        int
	podmanID   string
	podmanRoot string
	ref        criu.ContainerRef
	socket     string

	rootDir       string
	timeout       time.Duration
	output        string
	criu          criuFlags
	progressAfter time.Duration
	// imageRef and imageFile ask for the checkpoint image too.
	imageRef  string
	imageFile string
	lazyAt    string
	preDump   int
	seal      sealFlags
}

func (f *checkpointFlags) bind(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.IntVar(&f.pid, "pid", 0, "root pid of the process tree to checkpoint")
	fl.StringVar(&f.podmanID, "container-id", "", "id, id prefix or name of a podman container to checkpoint as runc does; podman container restore --import restores the archive")
	fl.StringVar(&f.podmanRoot, "podman-root", podman.DefaultGraphRoot, "podman's storage root (podman --root), whose state database (db.sql, podman 5; libpod/bolt_state.db, podman 4) names the containers")
	fl.StringVar(&f.ref.Namespace, "namespace", "", "namespace of the pod (needs the nodeshim daemon)")
	fl.StringVar(&f.ref.Pod, "pod", "", "pod name (needs the nodeshim daemon)")
	fl.StringVar(&f.ref.Container, "container", "", "container name (needs the nodeshim daemon)")
	fl.StringVar(&f.socket, "socket", filepath.Join(config.Defaults().RootDir, api.SocketName), "API socket of the nodeshim serve that checkpoints containers")
	fl.StringVar(&f.rootDir, "root-dir", criu.DefaultRootDir, "kubelet root dir; archives go to <root-dir>/checkpoints")
	fl.DurationVar(&f.timeout, "timeout", criu.DefaultTimeout, "give up (and leave the target running) after this long; 0 means the default")
	fl.StringVar(&f.imageRef, "image", "", "also write the checkpoint image of the archive under this name (with --image-file), as \"checkpoint image --tag\"")
	fl.StringVar(&f.lazyAt, "lazy", "", "HOST:PORT: lazy migration: serve the memory from a page server here until \"restore --lazy-from\" fetches it, then kill the tree (--pid)")
	fl.IntVar(&f.preDump, "pre-dump", 0, "N: run N rounds of criu pre-dump (iterative pre-copy) while the tree runs, so that the dump freezes it only to write what changed since; needs a kernel that tracks dirty memory (CONFIG_MEM_SOFT_DIRTY)")
	fl.StringVar(&f.imageFile, "image-file", "", "the OCI image archive --image writes (must not exist)")
	// The spelling before -o/--output was the output format everywhere.
	addDeprecatedAlias(fl, "image-output", "", "image-file")
	f.seal.addWrite(fl)
	f.criu.add(cmd)
	addProgressFlag(cmd, &f.progressAfter)
	addOutputFlag(cmd, &f.output)
}

// lazyServer checks the combination of flags before anything is frozen,
// and returns the page server of --lazy, nil without it.
func (f *checkpointFlags) lazyServer() (*criu.PageServer, error) {
	given := 0
	for _, g := range []bool{f.pid > 0, f.podmanID != "", f.ref != (criu.ContainerRef{})} {
		if g {
			given++
		}
	}
	if given == 0 {
		return nil, withExitCode(exitUsage, errors.New("give --pid PID, --container-id ID, or --namespace, --pod and --container"))
	}
	if given > 1 {
		return nil, withExitCode(exitUsage, errors.New("--pid, --container-id and --namespace/--pod/--container exclude each other"))
	}
	if (f.imageRef == "") != (f.imageFile == "") {
		return nil, withExitCode(exitUsage, errors.New("--image REF and --image-file FILE go together"))
	}
	if f.imageFile != "" {
		if _, err := os.Lstat(f.imageFile); err == nil {
			return nil, withExitCode(exitUsage, fmt.Errorf("--image-file %s exists: %w", f.imageFile, os.ErrExist))
		}
	}
	switch {
	case f.preDump < 0 || f.preDump > criu.MaxPreDump:
		return nil, withExitCode(exitUsage, fmt.Errorf("--pre-dump %d: want 0 to %d rounds", f.preDump, criu.MaxPreDump))
	case f.preDump > 0 && f.lazyAt != "":
		return nil, withExitCode(exitUsage, errors.New("--pre-dump and --lazy exclude each other: a lazy checkpoint copies the memory after the dump"))
	case f.preDump > 0 && f.pid <= 0 && f.podmanID == "":
		return nil, withExitCode(exitUsage, errors.New("--pre-dump applies to --pid and --container-id"))
	}
	var lazy *criu.PageServer
	if f.lazyAt != "" {
		if f.pid <= 0 || f.imageRef != "" {
			return nil, withExitCode(exitUsage, errors.New("--lazy applies to --pid, without --image"))
		}
		ps, err := criu.ParsePageServer(f.lazyAt)
		if err != nil {
			return nil, withExitCode(exitUsage, err)
		}
		lazy = &ps
	}
	if f.ref != (criu.ContainerRef{}) && (len(f.seal.c.Recipients) > 0 || f.seal.c.SigningKey != "") {
		return nil, withExitCode(exitUsage, errors.New("--recipient and --signing-key apply to --pid and --container-id; a pod's container is sealed as the nodeshim serve's checkpoint.encryption and checkpoint.signing say"))
	}
	if len(f.seal.c.Recipients) > 0 && f.imageRef != "" {
		return nil, withExitCode(exitUsage, errors.New("--image would write the encrypted archive's plain text into an image; leave out --image and make an encrypted image of the archive with `nodeshim checkpoint image ARCHIVE --encryption-key jwe:PUBLIC.pem --identity KEY`"))
	}
	if f.ref != (criu.ContainerRef{}) && f.imageRef != "" {
		return nil, withExitCode(exitUsage, errors.New("--image applies to --pid and --container-id; for a pod's container run \"nodeshim checkpoint image\" on the archive"))
	}
	return lazy, nil
}

const checkpointLong = `Checkpoint dumps a running process tree with CRIU and leaves it running.

The archive is written the way kubelet's Checkpoint API writes it:
<root-dir>/checkpoints/checkpoint-<pod>_<namespace>-<container>-<RFC3339 time>.tar,
mode 0600 in a 0700 directory, an uncompressed tar with the CRIU images under
checkpoint/, config.dump, spec.dump, dump.log and stats-dump. A second
checkpoint of the same container in the same second gets "-1", "-2", ...
after the time instead of overwriting the first. checkpointctl reads it.
"nodeshim checkpoint prune" prunes the same directory.

A process on this host is named pod "pid<PID>", namespace "host" and
container after its command name. A podman container (--container-id) is
read from podman's state database under --podman-root and dumped with the
options runc passes (its root, bind mounts, masked paths and devices as
external mounts, joined network and PID namespaces as external, its
cgroup); the archive is podman's layout (podman's config.dump, the bundle's
spec.dump, rootfs-diff.tar and deleted.files of the writable layer,
checkpoint/descriptors.json), named pod and container after the container
in namespace "podman", and "podman container restore --import" restores it.
A container (--namespace/--pod/--container)
is checkpointed by the running nodeshim serve, which resolves it through the
node's CRI runtime and answers as kubelet's checkpoint API does; its archive
goes to the directory of the shim's configuration, and --root-dir and the
CRIU flags do not apply.

Without --container, --namespace and --pod checkpoint the whole pod through
the nodeshim serve: its cgroup is frozen once, every running container is
dumped while the pod stays frozen, and the pod is thawed once; the result is
one pod checkpoint, a directory checkpoint-<pod>_<namespace>-<time> with
manifest.json and one container archive per container
(docs/pod-checkpoints.md). --image REF then asks for one checkpoint image per
container, named REF-<container>, written into the pod checkpoint.

CRIU is found through --criu-path, then $NODESHIM_CRIU, then PATH. On a
failure, a timeout or an interrupt the target is left running, unfrozen and
untraced, and no partial archive is left behind.

--image REF with --image-file FILE also writes the checkpoint image of the
new archive to FILE, as "nodeshim checkpoint image ARCHIVE --tag REF
--out-file FILE" does. The archive is kept. -o/--output is the format of
what is printed.

--lazy HOST:PORT (with --pid) is the first half of a lazy (post-copy)
migration: the archive holds everything but the tree's memory and is
published at once (its path is logged); the tree stays frozen while a
page server on HOST:PORT serves its memory to "nodeshim restore
--lazy-from HOST:PORT ARCHIVE" on the other node, where it runs as soon as
the rest is restored; when all of the memory is fetched the tree here is
killed and the command returns (--timeout bounds that wait too). Needs userfaultfd (CONFIG_USERFAULTFD) on
both nodes, and fs.pipe-max-size >= 4 MiB or CAP_SYS_RESOURCE for CRIU's
page pipes (nodeshim raises fs.pipe-max-size when it is lower);
"nodeshim report" shows criu.lazy_pages.

--pre-dump N (with --pid or --container-id) runs N rounds of "criu
pre-dump" while the tree runs on: the first copies all of its memory, each
later round and then the dump only what was written since the round
before, so the tree is frozen only while the last of it is written. The
archive holds every round (checkpoint/parent/...) and restores as any
other. Needs a kernel that tracks dirty memory (CONFIG_MEM_SOFT_DIRTY;
"nodeshim report" shows criu.feature.mem_dirty_track): elsewhere it is
refused before anything is frozen. Not with --lazy.`

const checkpointExample = `  # Checkpoint process 4242 and its children into /var/lib/kubelet/checkpoints
  nodeshim checkpoint --pid 4242

  # Into another kubelet root dir, with at most 2 minutes, as JSON
  nodeshim checkpoint --pid 4242 --root-dir /srv/kubelet --timeout 2m -o json

  # A podman container (runc), restorable with podman container restore --import
  nodeshim checkpoint --container-id web --podman-root /var/lib/containers/storage

  # A container of a pod, through the nodeshim serve on this node
  nodeshim checkpoint --namespace default --pod web-0 --container nginx

  # Every container of a pod at one instant, into one pod checkpoint
  nodeshim checkpoint --namespace default --pod web-0

  # Checkpoint and make the checkpoint image in one step (as "checkpoint image")
  nodeshim checkpoint --container-id web --image localhost/web-checkpoint:1 --image-file /tmp/web.oci.tar`

func newCheckpointCommand() *cobra.Command {
	var f checkpointFlags
	cmd := &cobra.Command{
		Use:     "checkpoint (--pid PID | --container-id ID | --namespace NS --pod POD [--container NAME])",
		Short:   "Checkpoint a running process tree or container into a root-only archive",
		Long:    checkpointLong,
		Example: checkpointExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.ref.Pod != "" && f.ref.Container == "" {
				return checkpointPodThroughDaemon(cmd, &f)
			}
			lazy, err := f.lazyServer()
			if err != nil {
				return err
			}
			if f.ref != (criu.ContainerRef{}) {
				return checkpointThroughDaemon(cmd, f.socket, f.ref, f.timeout, f.output)
			}
			return checkpointHere(cmd, &f, lazy)
		},
	}
	f.bind(cmd)
	cmd.AddCommand(newCheckpointPruneCommand(), newCheckpointImageCommand())
	return cmd
}

// checkpointHere checkpoints the process tree or podman container f names
// with CRIU, and with --image makes the checkpoint image of the archive.
func checkpointHere(cmd *cobra.Command, f *checkpointFlags, lazy *criu.PageServer) error {
	timeout := f.timeout
	if timeout <= 0 {
		timeout = criu.DefaultTimeout
	}
	// The flags first: a bad one is a usage error on any machine, with
	// or without criu.
	sealing, _, err := f.seal.load()
	if err != nil {
		return withExitCode(exitUsage, err)
	}
	bin, err := criu.Find(f.criu.path, nil)
	if err != nil {
		return err
	}
	pid := f.pid
	var target criu.Target
	if f.podmanID != "" {
		target, err = podman.Target("/proc", f.podmanRoot, f.podmanID, time.Now())
		pid = target.Pid
	} else {
		target, err = criu.PIDTarget("/proc", pid, time.Now())
	}
	if err != nil {
		return err
	}
	prog := newProgress(cmd.ErrOrStderr(), f.progressAfter)
	logger := slog.New(slog.NewTextHandler(prog.logOutput(cmd.ErrOrStderr()), nil))
	opts := criu.Options{
		Seal:                sealing,
		Binary:              bin,
		RootDir:             f.rootDir,
		TCPEstablished:      f.criu.tcpEstablished,
		ExtUnixSockets:      f.criu.extUnixSk,
		FileLocks:           f.criu.fileLocks,
		ShellJob:            f.criu.shellJob,
		HardwareBreakpoints: f.criu.breakpoints,
		Logger:              logger,
		Lazy:                lazy,
		PreDump:             f.preDump,
	}
	if lazy != nil {
		opts.Published = func(path string) {
			logger.Info("archive published; serving the memory until a restore --lazy-from fetches it", "path", path, "page-server", lazy.String())
		}
	}
	if prog != nil {
		opts.Progress = prog.update
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	// The lock, shared with the nodeshim serve of --socket, and
	// the space check come before anything is frozen.
	res, err := checkpoint.Run(ctx, target, opts, filepath.Join(filepath.Dir(f.socket), workentry.LockDirName))
	if err != nil {
		prog.done("checkpoint failed")
		return err
	}
	prog.done(fmt.Sprintf("checkpointed in %s, frozen %s", res.Total.Round(time.Millisecond), res.Frozen.Round(time.Millisecond)))
	out := checkpointOutput{
		Path: res.Path, SizeBytes: res.Size,
		FrozenSeconds: res.Frozen.Seconds(), DumpSeconds: res.Dump.Seconds(),
		ArchiveSeconds: res.Archive.Seconds(), TotalSeconds: res.Total.Seconds(), ServeSeconds: res.Serve.Seconds(),
		PagesWritten: res.PagesWritten, Pid: pid, Container: target.Ref.String(),
		RemovedOrphaned: len(res.Removed),
	}
	if f.imageRef != "" {
		istart := time.Now()
		img, err := writeCheckpointImage(res.Path, f.imageRef, f.imageFile, seal.OpenOptions{})
		if err != nil {
			return fmt.Errorf("checkpoint image of %s (the archive is kept): %w", res.Path, err)
		}
		out.Image = &checkpointImageOutput{Image: img, Output: f.imageFile, TotalSeconds: time.Since(istart).Seconds()}
	}
	return writeOutput(cmd.OutOrStdout(), f.output, out, func() string {
		return out.table(res.Frozen.Round(time.Millisecond).String(), res.Total.Round(time.Millisecond))
	})
}

// table is the human form of o, with frozen ("-" where unknown) and total
// as they are to be shown.
func (o checkpointOutput) table(frozen string, total time.Duration) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "ARCHIVE\tSIZE\tFROZEN\tTOTAL\n%s\t%s\t%s\t%s\n", o.Path, humanBytes(o.SizeBytes), frozen, total)
	if o.Image != nil {
		fmt.Fprintf(tw, "\nIMAGE\tMANIFEST\tSIZE\tFILE\n%s\t%s\t%s\t%s\n", o.Image.Ref, o.Image.Manifest, humanBytes(o.Image.Size), o.Image.Output)
	}
	tw.Flush()
	return b.String()
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// checkpointThroughDaemon asks the nodeshim serve on socket to checkpoint
// a container, and prints the archive it wrote.
func checkpointThroughDaemon(cmd *cobra.Command, socket string, ref criu.ContainerRef, timeout time.Duration, output string) error {
	if ref.Namespace == "" || ref.Pod == "" || ref.Container == "" {
		return withExitCode(exitUsage, errors.New("a container needs all of --namespace, --pod and --container"))
	}
	for _, name := range []string{"root-dir", "criu-path", "tcp-established", "ext-unix-sk", "file-locks", "shell-job", "hardware-breakpoints"} {
		if f := cmd.Flags().Lookup(name); f != nil && f.Changed {
			return withExitCode(exitUsage, fmt.Errorf("--%s applies to --pid only: the nodeshim serve checkpoints containers with its own configuration", name))
		}
	}
	wait := timeout
	if wait <= 0 {
		wait = criu.DefaultTimeout
	}
	// The shim gives up after the timeout and answers; allow for the answer.
	ctx, cancel := context.WithTimeout(cmd.Context(), wait+30*time.Second)
	defer cancel()
	start := time.Now()
	path, err := client.New(socket).Checkpoint(ctx, ref.Namespace, ref.Pod, ref.Container, timeout)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", ref, err)
	}
	out := checkpointOutput{Path: path, TotalSeconds: time.Since(start).Seconds(), Container: ref.String()}
	if fi, err := os.Stat(path); err == nil {
		out.SizeBytes = fi.Size()
	}
	// The API answers with the archive's path alone, as kubelet's does;
	// the frozen time and the pages are in the archive's dump statistics.
	frozen := "-"
	if st, err := criu.ArchiveDumpStats(path); err == nil {
		out.FrozenSeconds = float64(st.GetFrozenTime()) / 1e6
		out.PagesWritten = st.GetPagesWritten()
		frozen = (time.Duration(st.GetFrozenTime()) * time.Microsecond).Round(time.Millisecond).String()
	}
	return writeOutput(cmd.OutOrStdout(), output, out, func() string {
		return out.table(frozen, time.Since(start).Round(time.Millisecond))
	})
}
