package criu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"google.golang.org/protobuf/proto"

	"github.com/nodeshim/nodeshim/criu/archive"
	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/criu/workentry"
)

// RestoreOptions configure a restore.
type RestoreOptions struct {
	// Binary is the criu to run.
	Binary Binary
	// WorkRoot is where the private work directory is made; empty means
	// RootDir/checkpoints.
	WorkRoot string
	// RootDir is kubelet's root dir, used when WorkRoot is empty; empty
	// means DefaultRootDir.
	RootDir string
	// The same switches as Options: what the dump had to include must be
	// allowed again on restore.
	TCPEstablished bool
	ExtUnixSockets bool
	FileLocks      bool
	ShellJob       bool
	// HardwareBreakpoints: see Options.HardwareBreakpoints.
	HardwareBreakpoints bool
	// KeepWorkDir leaves the unpacked images and restore.log in place;
	// for an encrypted archive, on the tmpfs mounted on the work
	// directory, which stays mounted (unmount it to free its memory).
	KeepWorkDir bool
	// LazyFrom, when set, restores the archive of a lazy checkpoint
	// (Options.Lazy): a `criu lazy-pages` daemon fetches the memory from
	// the page server at LazyFrom, the tree runs as soon as CRIU has
	// restored everything else, and its pages arrive on its page faults
	// (userfaultfd) and in the background. Restore returns once all of
	// the memory is here. Needs what CheckLazyPages checks.
	LazyFrom *PageServer
	// LazyTLS, when set, secures the connection to LazyFrom (TLS).
	LazyTLS *TLS
	// Open says how the archive's signature is verified and how it is
	// decrypted (package seal): both happen before anything is unpacked.
	// The zero value reads plain archives and checks no signature.
	Open seal.OpenOptions
	// KillGrace is how long CRIU gets to abort after ctx ends; zero means
	// DefaultKillGrace.
	KillGrace time.Duration
	// Logger receives structured events; nil discards them.
	Logger *slog.Logger
	// Progress, if set, is told of each phase as it starts
	// (PhaseUnpacking, PhaseRestoring).
	Progress func(Progress)
}

// RestoreResult describes a restored process tree.
type RestoreResult struct {
	// Pid is the root of the restored tree. It is a child of the calling
	// process (CRIU's restore-sibling mode), detached from CRIU.
	Pid int
	// WorkDir is the unpacked archive; it is removed unless KeepWorkDir.
	WorkDir string
	// Unpack and Restore are the time to validate and unpack, and CRIU's
	// time until the tree runs.
	Unpack, Restore time.Duration
	// Fetch is, for a lazy restore, the time from the tree running to
	// all of its memory fetched.
	Fetch time.Duration
}

// Restore validates archive, unpacks it into a private work directory and
// restores its process tree with CRIU, detached. Nothing is written outside
// the work directory; an invalid archive fails with ErrInvalidArchive
// before anything is unpacked.
func Restore(ctx context.Context, archive string, o RestoreOptions) (res RestoreResult, err error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.KillGrace == 0 {
		o.KillGrace = DefaultKillGrace
	}
	root := o.WorkRoot
	if root == "" {
		rd := o.RootDir
		if rd == "" {
			rd = DefaultRootDir
		}
		root = filepath.Join(rd, CheckpointsDir)
	}
	if o.Progress == nil {
		o.Progress = func(Progress) {}
	}
	start := time.Now()
	o.Progress(Progress{Phase: PhaseUnpacking})
	f, err := os.Open(archive)
	if err != nil {
		return res, fmt.Errorf("open %s: %w", archive, err)
	}
	defer f.Close()
	sealed, err := seal.Open(f, archive, o.Open)
	if err != nil {
		return res, err
	}
	plain, err := sealed.Reader()
	if err != nil {
		return res, err
	}
	if _, err := ValidateArchive(plain); err != nil {
		return res, fmt.Errorf("%s: %w", archive, err)
	}
	if err := ensurePrivateDir(root); err != nil {
		return res, err
	}
	name, err := workentry.NewName(workentry.WorkPrefix, "")
	if err != nil {
		return res, err
	}
	work := filepath.Join(root, name)
	if err := os.Mkdir(work, 0o700); err != nil {
		return res, fmt.Errorf("create %s: %w", work, err)
	}
	res.WorkDir = work
	defer func() {
		if err != nil || !o.KeepWorkDir {
			if rmErr := os.RemoveAll(work); rmErr != nil {
				err = errors.Join(err, fmt.Errorf("remove %s: %w", work, rmErr))
			}
		}
	}()
	if sealed.Encrypted {
		// The plain images never reach a persistent disk.
		release, merr := seal.EnsureInMemory(work)
		if merr != nil {
			return res, fmt.Errorf("restore %s: %w", archive, merr)
		}
		defer func() {
			if err != nil || !o.KeepWorkDir {
				err = errors.Join(err, release())
			}
		}()
	}
	stream, err := sealed.Stream()
	if err != nil {
		return res, err
	}
	if err := Unpack(stream, work); err != nil {
		return res, fmt.Errorf("unpack %s: %w", archive, err)
	}
	// The rest of the stream, so that a signed archive's bytes are
	// checked again to their end before CRIU reads what was unpacked.
	if _, err := io.Copy(io.Discard, stream); err != nil {
		return res, fmt.Errorf("unpack %s: %w", archive, err)
	}
	res.Unpack = time.Since(start)

	rstart := time.Now()
	o.Progress(Progress{Phase: PhaseRestoring})
	var daemon *LazyPages
	if o.LazyFrom != nil {
		if raised, err := PrepareLazyPages(""); err != nil {
			return res, fmt.Errorf("restore %s --lazy-from: %w", archive, err)
		} else if raised {
			o.Logger.Info("raised fs.pipe-max-size for CRIU's page transfer", "bytes", LazyPipeBytes)
		}
		daemon, err = StartLazyPages(ctx, LazyPagesOptions{Binary: o.Binary, From: *o.LazyFrom, TLS: o.LazyTLS,
			ImagesDir: filepath.Join(work, ImagesDir), WorkDir: work, HardwareBreakpoints: o.HardwareBreakpoints})
		if err != nil {
			return res, fmt.Errorf("restore %s: %w", archive, err)
		}
	}
	pid, err := restore(ctx, o, work)
	res.Restore = time.Since(rstart)
	if err != nil {
		if daemon != nil {
			daemon.Kill()
		}
		return res, fmt.Errorf("restore %s: %w", archive, err)
	}
	if daemon != nil {
		fstart := time.Now()
		err := daemon.Wait(ctx)
		res.Fetch = time.Since(fstart)
		if err != nil {
			// The tree runs and faults on pages nobody serves any more.
			_ = syscall.Kill(pid, syscall.SIGKILL)
			return res, fmt.Errorf("restore %s: pid %d killed: %w", archive, pid, err)
		}
	}
	res.Pid = pid
	o.Logger.Info("restored", "archive", archive, "pid", pid, "took", res.Unpack+res.Restore)
	return res, nil
}

// Unpack is archive.Unpack within the default archive.Limits: it
// extracts a checkpoint archive into dir through an os.Root, within the
// free space of dir's filesystem, and leaves nothing on failure.
func Unpack(r io.Reader, dir string) error { return archive.Unpack(r, dir, archive.Limits{}) }

// restore runs CRIU's restore request on the images in work/checkpoint.
func restore(ctx context.Context, o RestoreOptions, work string) (int, error) {
	images := filepath.Join(work, ImagesDir)
	imgDir, err := os.Open(images)
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", images, err)
	}
	defer imgDir.Close()
	workDir, err := os.Open(work)
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", work, err)
	}
	defer workDir.Close()
	opts := &rpc.CriuOpts{
		ImagesDirFd:    proto.Int32(int32(imgDir.Fd())),
		WorkDirFd:      proto.Int32(int32(workDir.Fd())),
		LogLevel:       proto.Int32(4),
		LogFile:        proto.String(RestoreLog),
		RstSibling:     proto.Bool(true),
		TcpEstablished: proto.Bool(o.TCPEstablished),
		ExtUnixSk:      proto.Bool(o.ExtUnixSockets),
		FileLocks:      proto.Bool(o.FileLocks),
		ShellJob:       proto.Bool(o.ShellJob),
		LazyPages:      proto.Bool(o.LazyFrom != nil),
	}
	s, err := startSwrk(o.Binary, o.HardwareBreakpoints)
	if err != nil {
		return 0, err
	}
	resp, callErr := s.call(ctx, &rpc.CriuReq{Type: rpc.CriuReqType_RESTORE.Enum(), Opts: opts}, nil)
	s.close(o.KillGrace)
	if callErr != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, fmt.Errorf("%w; restore.log: %s", callErr, logErrors(filepath.Join(work, RestoreLog)))
	}
	pid := int(resp.GetRestore().GetPid())
	if pid <= 0 {
		return 0, fmt.Errorf("criu restored no pid (response %v)", resp)
	}
	return pid, nil
}
