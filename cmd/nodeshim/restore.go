package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/runtimes/podman"
	"github.com/nodeshim/nodeshim/shim/checkpoint"
	"github.com/nodeshim/nodeshim/shim/checkpoint/retention"
)

// restoreOutput is the machine-readable form of `nodeshim restore`.
type restoreOutput struct {
	// Engine is the runtime the archive is for, and the one that runs the
	// restored tree: "process" (criu, detached), "podman".
	Engine      string `json:"engine"`
	Pid         int    `json:"pid"`
	Archive     string `json:"archive"`
	ContainerID string `json:"containerID,omitempty"`
	Name        string `json:"name,omitempty"`
	WorkDir     string `json:"workDir,omitempty"`
	// RuncRoot, Bundle and Rootfs locate a runc container restored from a
	// containerd CRI archive.
	RuncRoot string `json:"runcRoot,omitempty"`
	Bundle   string `json:"bundle,omitempty"`
	Rootfs   string `json:"rootfs,omitempty"`
	// UnpackSeconds is nodeshim's validation and unpacking; RestoreSeconds
	// CRIU's restore, or the runtime's whole restore.
	UnpackSeconds float64 `json:"unpackSeconds"`
	// FetchSeconds is, for --lazy-from, the time from the tree running to
	// all of its memory fetched.
	FetchSeconds   float64 `json:"fetchSeconds,omitempty"`
	RestoreSeconds float64 `json:"restoreSeconds"`
}

// errEngineNotRestorable: nodeshim knows the archive's engine but has no
// proven way to restore it on this node.
var errEngineNotRestorable = errors.New("nodeshim cannot restore archives of this engine")

// restoreFlags are the flags of `nodeshim restore`.
type restoreFlags struct {
	rootDir       string
	workRoot      string
	keep          bool
	timeout       time.Duration
	output        string
	criu          criuFlags
	progressAfter time.Duration
	lazyFrom      string
	// Podman archives.
	podmanBin     string
	podmanRoot    string
	podmanRunRoot string
	// Containerd CRI archives.
	runcBin    string
	runcRoot   string
	ctrBin     string
	containerd string
	restoreDir string
	seal       sealFlags
}

func (f *restoreFlags) bind(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.rootDir, "root-dir", criu.DefaultRootDir, "kubelet root dir; the work directory is made under <root-dir>/checkpoints (process archives)")
	fl.StringVar(&f.workRoot, "work-dir", "", "make the private work directory here instead (same rules: 0700, root-owned)")
	fl.BoolVar(&f.keep, "keep-work-dir", false, "keep the unpacked images and restore.log (process archives)")
	fl.DurationVar(&f.timeout, "timeout", criu.DefaultTimeout, "give up after this long")
	fl.StringVar(&f.lazyFrom, "lazy-from", "", "HOST:PORT of the page server of a \"checkpoint --lazy\": the tree runs at once, its memory follows over userfaultfd (process archives)")
	fl.StringVar(&f.podmanBin, "podman", "podman", "podman binary that restores podman archives")
	fl.StringVar(&f.podmanRoot, "podman-root", "", "podman's storage root (podman --root); podman's own default when empty")
	fl.StringVar(&f.podmanRunRoot, "podman-runroot", "", "podman's run root (podman --runroot); podman's own default when empty")
	fl.StringVar(&f.runcBin, "runc", "runc", "runc binary that restores containerd CRI archives")
	fl.StringVar(&f.runcRoot, "runc-root", checkpoint.DefaultRuncRoot, "runc --root of containers restored from containerd CRI archives")
	fl.StringVar(&f.ctrBin, "ctr", "ctr", "containerd's ctr binary, which mounts a containerd archive's image")
	fl.StringVar(&f.containerd, "containerd-address", "", "containerd's socket (ctr --address); ctr's default when empty")
	fl.StringVar(&f.restoreDir, "restore-dir", checkpoint.DefaultRestoreDir, "where bundles of containers restored from containerd CRI archives are made")
	f.seal.addRead(fl, true)
	f.criu.add(cmd)
	addProgressFlag(cmd, &f.progressAfter)
	addOutputFlag(cmd, &f.output)
}

const restoreLong = `Restore validates a checkpoint archive and brings back what it holds on this
node, by the engine its config.dump and spec.dump name:

  process  a process tree nodeshim checkpointed by --pid: unpacked into a
           private 0700 work directory and restored with CRIU, detached.
           The original pids must be free: the checkpointed tree must have
           exited. Prints the new root pid.
  podman   a podman container (nodeshim checkpoint --container-id, or podman
           container checkpoint --export): restored by podman container
           restore --import, which makes the container again from its image,
           applies its writable layer's changes and has runc restore it with
           the CRIU nodeshim finds. The original container must be gone.
           Prints the container's name, id and pid.
  containerd
           a container of a containerd CRI pod (nodeshim checkpoint
           --namespace/--pod/--container): its image is mounted by
           containerd (ctr images mount --rw) as a fresh root, the archive's
           writable-layer changes are applied, and runc restore has CRIU
           bring the process tree back in a runc container of its own
           (--runc-root) in its pod's namespaces and mounts; the pod must
           still exist. containerd and kubelet do not know the restored
           container: it is stopped with runc --root RUNC_ROOT delete --force
           ID, and its root unmounted with ctr images unmount --rm ROOTFS.
           Prints the runc container id, pid and bundle.

Archives of CRI-O containers are refused (see docs/checkpoint.md).

An archive with absolute paths, ".." entries, symlinks that point out of it,
entries other than directories, files and symlinks, or without checkpoint/,
config.dump or spec.dump is refused before anything is unpacked or any
runtime runs.`

const restoreExample = `  nodeshim restore /var/lib/kubelet/checkpoints/checkpoint-pid4242_host-app-2025-01-02T03:04:05Z.tar

  # A podman container's archive, into podman's default storage
  nodeshim restore /var/lib/kubelet/checkpoints/checkpoint-web_podman-web-2025-01-02T03:04:05Z.tar

  # Keep the unpacked images and restore.log for inspection
  nodeshim restore --keep-work-dir -o json ARCHIVE`

func newRestoreCommand() *cobra.Command {
	var f restoreFlags
	cmd := &cobra.Command{
		Use:     "restore ARCHIVE",
		Short:   "Restore a process tree, a podman or a containerd CRI container from a checkpoint archive",
		Long:    restoreLong,
		Example: restoreExample,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRestore(cmd, &f, args[0])
		},
	}
	f.bind(cmd)
	return cmd
}

// runRestore restores archive with the engine its metadata names.
func runRestore(cmd *cobra.Command, f *restoreFlags, archive string) error {
	start := time.Now()
	// Retention (nodeshim serve, checkpoint prune) keeps an
	// archive held while it is read.
	release, err := retention.Hold(archive)
	if err != nil {
		return err
	}
	defer release() //nolint:errcheck // a read-only descriptor
	prog := newProgress(cmd.ErrOrStderr(), f.progressAfter)
	prog.update(criu.Progress{Phase: criu.PhaseUnpacking})
	out, table, err := restoreArchive(cmd, f, archive, start, prog)
	if err != nil {
		prog.done("restore failed")
		return err
	}
	prog.done(fmt.Sprintf("restored in %s, pid %d", time.Since(start).Round(time.Millisecond), out.Pid))
	return writeOutput(cmd.OutOrStdout(), f.output, out, func() string { return table })
}

// restoreArchive validates archive and restores it with its engine; it
// returns what restore prints, as data and as the table.
func restoreArchive(cmd *cobra.Command, f *restoreFlags, archive string, start time.Time, prog *progress) (restoreOutput, string, error) {
	out := restoreOutput{Archive: archive}
	_, opening, err := f.seal.load()
	if err != nil {
		return out, "", withExitCode(exitUsage, err)
	}
	meta, encrypted, err := readSealedArchive(archive, opening)
	if err != nil {
		return out, "", err
	}
	if encrypted && meta.Engine != criu.EngineProcess {
		return out, "", fmt.Errorf("%s: an encrypted %s archive: %s restores it from the file itself and cannot decrypt it; encrypted archives restore as process trees", archive, meta.Engine, meta.Engine)
	}
	out.Engine = string(meta.Engine)
	if meta.Engine != criu.EngineProcess && meta.Engine != criu.EnginePodman && meta.Engine != criu.EngineContainerd {
		return out, "", fmt.Errorf("%s: archive of engine %s (container %q, runtime %q): %w; it restores process trees checkpointed by --pid, podman and containerd CRI containers",
			archive, meta.Engine, meta.Config.Name, meta.Config.OCIRuntime, errEngineNotRestorable)
	}
	bin, err := criu.Find(f.criu.path, nil)
	if err != nil {
		return out, "", err
	}
	timeout := f.timeout
	if timeout <= 0 {
		timeout = criu.DefaultTimeout
	}
	var lazy *criu.PageServer
	if f.lazyFrom != "" {
		if meta.Engine != criu.EngineProcess {
			return out, "", withExitCode(exitUsage, fmt.Errorf("--lazy-from restores process archives (checkpoint --pid --lazy); %s is a %s archive", archive, meta.Engine))
		}
		ps, err := criu.ParsePageServer(f.lazyFrom)
		if err != nil {
			return out, "", withExitCode(exitUsage, err)
		}
		lazy = &ps
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	switch meta.Engine {
	case criu.EngineProcess:
		res, err := criu.Restore(ctx, archive, criu.RestoreOptions{
			Binary:              bin,
			RootDir:             f.rootDir,
			WorkRoot:            f.workRoot,
			KeepWorkDir:         f.keep,
			TCPEstablished:      f.criu.tcpEstablished,
			ExtUnixSockets:      f.criu.extUnixSk,
			FileLocks:           f.criu.fileLocks,
			ShellJob:            f.criu.shellJob,
			HardwareBreakpoints: f.criu.breakpoints,
			Logger:              slog.New(slog.NewTextHandler(prog.logOutput(cmd.ErrOrStderr()), nil)),
			Progress:            prog.update,
			LazyFrom:            lazy,
			Open:                opening,
		})
		if err != nil {
			return out, "", err
		}
		out.Pid, out.UnpackSeconds, out.RestoreSeconds = res.Pid, res.Unpack.Seconds(), res.Restore.Seconds()
		out.FetchSeconds = res.Fetch.Seconds()
		if f.keep {
			out.WorkDir = res.WorkDir
		}
		return out, fmt.Sprintf("%d\n", res.Pid), nil
	case criu.EnginePodman:
		var global []string
		if f.podmanRoot != "" {
			global = append(global, "--root", f.podmanRoot)
		}
		if f.podmanRunRoot != "" {
			global = append(global, "--runroot", f.podmanRunRoot)
		}
		out.UnpackSeconds = time.Since(start).Seconds()
		prog.update(criu.Progress{Phase: criu.PhaseRestoring})
		r, err := podman.Restore(ctx, archive, podman.RestoreOptions{Podman: f.podmanBin, GlobalFlags: global, Criu: bin})
		if err != nil {
			return out, "", err
		}
		out.Pid, out.ContainerID, out.Name, out.RestoreSeconds = r.Pid, r.ID, r.Name, r.Took.Seconds()
		return out, fmt.Sprintf("podman container %s (%s) runs as pid %d\n", r.Name, r.ID, r.Pid), nil
	default: // criu.EngineContainerd
		prog.update(criu.Progress{Phase: criu.PhaseRestoring})
		r, err := checkpoint.RestoreContainerd(ctx, archive, checkpoint.RestoreOptions{
			Criu: bin, Runc: f.runcBin, RuncRoot: f.runcRoot, Ctr: f.ctrBin, ContainerdAddress: f.containerd, Dir: f.restoreDir,
		})
		if err != nil {
			return out, "", err
		}
		out.Pid, out.ContainerID, out.Name, out.RestoreSeconds = r.Pid, r.ID, meta.Config.Name, r.Took.Seconds()
		out.RuncRoot, out.Bundle, out.Rootfs = r.RuncRoot, r.Bundle, r.Rootfs
		return out, fmt.Sprintf("runc container %s (runc --root %s) runs as pid %d; bundle %s\n", r.ID, r.RuncRoot, r.Pid, r.Bundle), nil
	}
}

// readSealedArchive verifies archive and, if it is encrypted, decrypts
// it as o says (seal.Open: nothing is read before), validates it and
// reads its metadata; it also says whether the archive is encrypted.
func readSealedArchive(archive string, o seal.OpenOptions) (criu.ArchiveMeta, bool, error) {
	f, err := os.Open(archive)
	if err != nil {
		return criu.ArchiveMeta{}, false, fmt.Errorf("open %s: %w", archive, err)
	}
	defer f.Close()
	a, err := seal.Open(f, archive, o)
	if err != nil {
		return criu.ArchiveMeta{}, false, err
	}
	r, err := a.Reader()
	if err != nil {
		return criu.ArchiveMeta{}, false, err
	}
	if _, err := criu.ValidateArchive(r); err != nil {
		return criu.ArchiveMeta{}, false, fmt.Errorf("%s: %w", archive, err)
	}
	if r, err = a.Reader(); err != nil {
		return criu.ArchiveMeta{}, false, err
	}
	meta, err := criu.ReadArchiveMeta(r)
	if err != nil {
		return meta, false, fmt.Errorf("%s: %w", archive, err)
	}
	return meta, a.Encrypted, nil
}
