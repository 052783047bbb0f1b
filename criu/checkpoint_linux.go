package criu

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"github.com/checkpoint-restore/go-criu/v7/stats"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/nodeshim/nodeshim/criu/archive"
	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/criu/workentry"
	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// DefaultTimeout bounds a checkpoint when the caller gives no timeout
// (kubelet's ?timeout= absent or 0).
const DefaultTimeout = 30 * time.Second

// DefaultKillGrace is how long CRIU gets to abort on its own after a
// cancellation before it is killed.
const DefaultKillGrace = 10 * time.Second

// Errors callers branch on.
var (
	// ErrTargetTraced: the target is already ptraced, so CRIU cannot seize it.
	ErrTargetTraced = errors.New("target is traced by another process")
	// ErrTargetLost: the target did not survive a failed checkpoint.
	ErrTargetLost = errors.New("target did not survive the checkpoint")
)

// Options configure a checkpoint.
type Options struct {
	// Binary is the criu to run.
	Binary Binary
	// RootDir is kubelet's root dir; archives go to RootDir/checkpoints.
	// Empty means DefaultRootDir.
	RootDir string
	// ArchiveDir, when set, receives the archives instead of
	// RootDir/checkpoints (the daemon's configured checkpoint.dir).
	ArchiveDir string
	// ProcRoot is where procfs is mounted; empty means /proc.
	ProcRoot string
	// LockDir holds the target locks (workentry.LockTarget) of the
	// checkpoints sharing the archive directory; the work entries of
	// their holders are never swept as left over. Empty: none consulted,
	// and an entry is judged by its maker's pid and start time alone.
	LockDir string

	// What CRIU may dump. A plain process with no sockets, locks or
	// terminal needs none of these; containers usually need the first three.
	TCPEstablished bool // established TCP connections (--tcp-established)
	ExtUnixSockets bool // unix sockets connected outside the tree (--ext-unix-sk)
	FileLocks      bool // POSIX and flock locks (--file-locks)
	ShellJob       bool // a tree attached to a terminal session (--shell-job)

	// EarlyWriteback, if positive, is how often the writeback of CRIU's
	// pages images is started while CRIU writes them, so that the final
	// fsync finds more of them on disk. Off by default: CRIU writes pages
	// while the target is frozen, and measured here the extra I/O made the
	// dump, and so the frozen time, up to twice as long (BENCHMARKS.md).
	EarlyWriteback time.Duration

	// CopyArchive always copies the images into a new temp archive instead
	// of building the archive around CRIU's largest pages image.
	CopyArchive bool

	// HardwareBreakpoints lets CRIU use hardware breakpoints to catch
	// tasks leaving its parasite code. Off by default: where they do not
	// fire (virtual machines), CRIU hangs with the target frozen; see
	// noBreakpointsEnv.
	HardwareBreakpoints bool

	// Lazy, when set, makes the checkpoint the first half of a lazy
	// (post-copy) migration: CRIU writes every image but the memory, and
	// then serves the memory from a page server at Lazy while the tree
	// stays frozen, until a restore with RestoreOptions.LazyFrom has
	// fetched all of it; then the tree is killed, as it runs on over
	// there. The archive is published (see Published) as soon as the page
	// server is ready, and Checkpoint returns when the memory is fetched.
	// Needs what CheckLazyPages checks.
	Lazy *PageServer
	// PageServerTLS, when set, serves a Lazy checkpoint's memory over
	// mutual TLS (TLS): then an encrypted checkpoint may be lazy too.
	PageServerTLS *TLS
	// PreDump, if positive, is the number of rounds of `criu pre-dump`
	// (iterative pre-copy) run before the dump, while the tree runs on:
	// the first round writes all its memory, each later one and then the
	// dump only the pages dirtied since the round before, so that the
	// tree is frozen only while those are written. The rounds' images
	// go into the archive as checkpoint/parent, checkpoint/parent/parent
	// and so on, which the restore reads through. Needs a kernel that
	// tracks dirty memory (CheckPreDump; else ErrPreDumpUnsupported
	// before anything runs); at most MaxPreDump; not with Lazy.
	PreDump int
	// Published, if set, is called with the archive's path once it is
	// published, before Checkpoint returns: for a Lazy checkpoint, while
	// the page server waits for the restore.
	Published func(path string)

	// Seal, when it has recipients or a signer, encrypts the archive as
	// it is written and signs it (package seal). With recipients, the
	// work directory, where CRIU writes its plain images, is on a tmpfs
	// (mounted if need be), and a Lazy checkpoint is refused: its page
	// transfer is not encrypted.
	Seal seal.WriteOptions

	// KillGrace is how long CRIU gets to abort after ctx ends before it is
	// killed; zero means DefaultKillGrace.
	KillGrace time.Duration
	// Now is the clock for names and metadata; nil means time.Now.
	Now func() time.Time
	// Progress, if set, is called from another goroutine with the phase
	// and the bytes written so far, at most every ProgressInterval.
	Progress func(Progress)
	// ProgressInterval defaults to 250ms.
	ProgressInterval time.Duration
	// Logger receives structured events; nil discards them.
	Logger *slog.Logger
}

func (o *Options) defaults() {
	if o.RootDir == "" {
		o.RootDir = DefaultRootDir
	}
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	if o.KillGrace == 0 {
		o.KillGrace = DefaultKillGrace
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ProgressInterval == 0 {
		o.ProgressInterval = 250 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Progress is a snapshot of a running checkpoint or restore.
type Progress struct {
	// Phase is one of the Phase constants.
	Phase string
	// Bytes is what has been written so far in this phase.
	Bytes int64
	// Total, while dumping, is the tree's resident memory when the dump
	// started: about what CRIU's pages images will hold; 0 when unknown.
	Total int64
}

// The phases a Progress reports, in order.
const (
	// PhaseFreezing: CRIU is started and freezes and collects the tree; it
	// has written no pages yet.
	PhaseFreezing = "freezing"
	// PhaseDumping: CRIU writes the images (Bytes of about Total).
	PhaseDumping = "dumping"
	// PhaseArchiving: the tar is written.
	PhaseArchiving = "archiving"
	// PhaseSyncing: the archive is fsynced before it is published.
	PhaseSyncing = "syncing"
	// PhaseDone: the archive is published (Bytes is its size).
	PhaseDone = "done"
	// PhaseUnpacking and PhaseRestoring are a restore's: the archive is
	// validated and unpacked, then CRIU restores the tree.
	PhaseUnpacking = "unpacking"
	PhaseRestoring = "restoring"
)

// Result describes a finished checkpoint.
type Result struct {
	// Path is the archive.
	Path string
	// Size is its size in bytes.
	Size int64
	// Frozen is how long the target's tasks were frozen: CRIU's
	// frozen_time, or, for a container whose freezer cgroup nodeshim
	// froze itself (see preFreeze), from that freeze to its thaw.
	// Freezing is how long freezing them took. For a Lazy
	// checkpoint, Frozen is the time from the dump's start to the page
	// server's (an upper bound of the freeze before the tree can run on
	// the restoring side; it stays frozen here while its memory goes).
	Frozen, Freezing time.Duration
	// MemDump and MemWrite are CRIU's time to collect and to write pages.
	MemDump, MemWrite time.Duration
	// PagesWritten counts the pages CRIU wrote.
	PagesWritten uint64
	// PreDumpFrozen is, with Options.PreDump, the sum of the pre-dump
	// rounds' own frozen times (CRIU's, while it collects a round's
	// pages); Frozen is the final dump's.
	PreDumpFrozen time.Duration
	// Serve is, for a Lazy checkpoint, the time from the page server's
	// start to the restore having fetched all the memory (the tree is
	// frozen here and running there meanwhile); Dump includes it.
	Serve time.Duration
	// Dump is the CRIU request from start to response, Archive the time
	// to write and publish the tar, Fsync the part of Archive spent in
	// fsync(2) of the archive, Total the whole call.
	Dump, Archive, Fsync, Total time.Duration
	// InPlace says the archive was built around CRIU's pages image
	// rather than copied (see Options.CopyArchive).
	InPlace bool
	// Removed lists stale work entries of killed nodeshims swept first.
	Removed []string
}

// Checkpoint dumps the process tree of t with CRIU, leaving it running, and
// writes a checkpoint archive under RootDir/checkpoints. It returns when the
// archive is published under its final name, or with an error after having
// removed every file it made and made sure the target runs on, unfrozen
// and untraced. ctx bounds the whole call.
func Checkpoint(ctx context.Context, t Target, o Options) (res Result, err error) {
	o.defaults()
	start := time.Now()
	if err := t.Validate(); err != nil {
		return res, err
	}
	before, err := ReadProcState(o.ProcRoot, t.Pid)
	if err != nil {
		return res, fmt.Errorf("checkpoint pid %d: %w", t.Pid, err)
	}
	if before.Gone() {
		return res, fmt.Errorf("checkpoint pid %d: %s: %w", t.Pid, before, ErrNoProcess)
	}
	if before.TracerPid != 0 {
		return res, fmt.Errorf("checkpoint pid %d: %w (pid %d)", t.Pid, ErrTargetTraced, before.TracerPid)
	}
	frozenBefore := cgroupFrozen(t.Container.FreezeCgroup)
	if o.Lazy != nil && len(o.Seal.Recipients) > 0 && o.PageServerTLS == nil {
		return res, fmt.Errorf("checkpoint pid %d --lazy: encryption is configured and the page server sends memory in the clear (no page server TLS)", t.Pid)
	}
	if o.PageServerTLS != nil {
		if err := o.PageServerTLS.validate(); err != nil {
			return res, fmt.Errorf("checkpoint pid %d --lazy: %w: %w", t.Pid, err, errdefs.ErrInvalidArgument)
		}
	}
	if o.PreDump < 0 || o.PreDump > MaxPreDump {
		return res, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("checkpoint pid %d: %d pre-dump rounds, want 0 to %d", t.Pid, o.PreDump, MaxPreDump))
	}
	if o.PreDump > 0 && o.Lazy != nil {
		return res, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("checkpoint pid %d: pre-dump rounds and --lazy exclude each other", t.Pid))
	}
	if o.PreDump > 0 {
		if err := CheckPreDump(ctx, o.Binary); err != nil {
			return res, fmt.Errorf("checkpoint pid %d --pre-dump %d: %w", t.Pid, o.PreDump, err)
		}
		// The final pages images hold only what the last round left
		// dirty; the bulk is in the rounds' directories.
		o.CopyArchive = true
	}
	if o.Lazy != nil {
		// The archive is small (no memory) and is written while CRIU
		// still runs: copy the images rather than rework one in place.
		o.CopyArchive = true
		raised, err := PrepareLazyPages(o.ProcRoot)
		if raised {
			o.Logger.Info("raised fs.pipe-max-size for CRIU's page server", "bytes", LazyPipeBytes)
		}
		if err != nil {
			return res, fmt.Errorf("checkpoint pid %d --lazy: %w", t.Pid, err)
		}
	}
	dir := o.ArchiveDir
	if dir == "" {
		dir = filepath.Join(o.RootDir, CheckpointsDir)
	}
	if err := ensurePrivateDir(dir); err != nil {
		return res, err
	}
	if res.Removed = workentry.Sweep(dir, workentry.Owners{LockDir: o.LockDir}); len(res.Removed) > 0 {
		o.Logger.Info("removed work files of an interrupted checkpoint", "dir", dir, "entries", res.Removed)
	}
	if o.LockDir != "" {
		thawed, err := workentry.ThawLeftFrozen(o.LockDir)
		if len(thawed) > 0 {
			o.Logger.Warn("thawed cgroups that a killed checkpoint left frozen", "cgroups", thawed)
		}
		if err != nil {
			o.Logger.Warn("thaw cgroups that a killed checkpoint left frozen", "err", err)
		}
	}
	workName, err := workentry.NewName(workentry.WorkPrefix, "")
	if err != nil {
		return res, err
	}
	work := filepath.Join(dir, workName)
	if err := os.Mkdir(work, 0o700); err != nil {
		return res, fmt.Errorf("create %s: %w", work, err)
	}
	defer func() {
		if rmErr := os.RemoveAll(work); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("remove %s: %w", work, rmErr))
		}
	}()
	if len(o.Seal.Recipients) > 0 {
		// The images and the plain tar never reach a persistent disk.
		dirInMemory, merr := seal.InMemory(dir)
		if merr != nil {
			return res, merr
		}
		release, merr := seal.EnsureInMemory(work)
		if merr != nil {
			return res, fmt.Errorf("checkpoint pid %d: %w", t.Pid, merr)
		}
		defer func() { err = errors.Join(err, release()) }()
		// They take memory, then: refuse before anything is frozen what
		// the tmpfs, the node or nodeshim's memory cgroup cannot hold (a
		// tmpfs write past them fails with ENOSPC, or the OOM killer
		// takes CRIU, with the tree frozen). A checkpoint directory in
		// memory holds the archive beside the images.
		est, merr := EstimateSize(o.ProcRoot, t)
		if merr != nil {
			return res, fmt.Errorf("checkpoint pid %d: %w", t.Pid, merr)
		}
		need, what := est, "CRIU's images: the tree's resident memory and its writable layer"
		if dirInMemory {
			need, what = 2*est, "CRIU's images, the tree's resident memory and its writable layer, and the archive beside them"
		}
		if merr := checkMemoryRoom(o.ProcRoot, work, need, what); merr != nil {
			return res, fmt.Errorf("checkpoint pid %d: %w", t.Pid, merr)
		}
	}
	images := filepath.Join(work, ImagesDir)
	if err := os.Mkdir(images, 0o700); err != nil {
		return res, fmt.Errorf("create %s: %w", images, err)
	}

	if t.Container.Descriptors != nil {
		if err := archive.WriteJSON(filepath.Join(images, DescriptorsFile), t.Container.Descriptors); err != nil {
			return res, err
		}
	}

	checkpointedAt := o.Now()
	meta, err := metadata(t, checkpointedAt)
	if err != nil {
		return res, err
	}
	// archive writes and publishes the archive once CRIU has written its
	// images: after the dump, or, for a lazy dump, once its page server
	// is ready (the tree is frozen then, its memory not yet copied).
	archive := func() error {
		archStart := time.Now()
		defer func() { res.Archive = time.Since(archStart) }()
		if t.Layer.Upper != "" {
			if err := WriteRootfsDiff(ctx, t.Layer, work); err != nil {
				return fmt.Errorf("checkpoint pid %d: %w", t.Pid, err)
			}
		}
		var err error
		res.Path, res.Size, res.Fsync, err = writeArchive(ctx, o, &res.InPlace, dir, work, images, meta, func(attempt int) string {
			return ArchiveName(t.Ref, checkpointedAt, attempt)
		})
		if err == nil && o.Published != nil {
			o.Published(res.Path)
		}
		return err
	}
	dumpStart := time.Now()
	var derr error
	if o.Lazy != nil {
		derr = dumpLazy(ctx, t, o, work, images, archive, &res)
	} else {
		var frozenAt time.Time
		var preDump func()
		var record *workentry.FrozenRecord
		if cg := t.Container.FreezeCgroup; cg != "" && !frozenBefore {
			// At CRIU's pre-dump notification CRIU has started and not
			// yet frozen anything: its start-up stays out of the freeze.
			preDump = func() {
				if o.LockDir != "" {
					// A nodeshim killed from here to the thaw leaves
					// the record, and the next one thaws the cgroup.
					r, err := workentry.RecordFrozen(o.LockDir, []string{cg})
					if err != nil {
						o.Logger.Debug("freezer cgroup not recorded; CRIU freezes it", "cgroup", cg, "err", err)
						return
					}
					record = r
				}
				freezeStart := time.Now()
				if at, ok := preFreeze(cg, time.Second); ok {
					frozenAt, res.Freezing = at, at.Sub(freezeStart)
				} else {
					o.Logger.Debug("freezer cgroup did not freeze within a second; CRIU freezes it", "cgroup", cg)
				}
			}
		}
		var round dumpRound
		if o.PreDump > 0 {
			round.parent, derr = preDumpRounds(ctx, t, o, work, &res)
		}
		if derr == nil {
			derr = dump(ctx, t, o, work, images, -1, preDump, round)
		}
		if derr == nil && o.PreDump > 0 {
			derr = nestPreDumps(work, images, o.PreDump)
		}
		if !frozenAt.IsZero() {
			if err := thawCgroup(t.Container.FreezeCgroup); err != nil {
				derr = errors.Join(derr, fmt.Errorf("thaw %s: %w", t.Container.FreezeCgroup, err))
			} else if err := record.Thawed(); err != nil {
				o.Logger.Warn("remove the record of a thawed cgroup", "cgroup", t.Container.FreezeCgroup, "err", err)
			}
			// CRIU's frozen_time starts after the freeze and ends before
			// the thaw; the tree was stopped for this long.
			res.Frozen = time.Since(frozenAt)
		} else if err := record.Thawed(); err != nil {
			// Not frozen by us: preFreeze gave it to CRIU, which
			// thaws it itself.
			o.Logger.Warn("remove the record of an unfrozen cgroup", "cgroup", t.Container.FreezeCgroup, "err", err)
		}
	}
	res.Dump = time.Since(dumpStart)
	if derr != nil {
		if res.Path != "" {
			// The signature first: a kill in between leaves an unsigned
			// archive, which a policy refuses and retention removes, not
			// a signature beside nothing.
			derr = errors.Join(derr, seal.RemoveSignature(res.Path), os.Remove(res.Path))
			res.Path = ""
		}
		return res, errors.Join(derr, ensureRunning(o, t, before, frozenBefore))
	}
	if st, err := ReadDumpStats(filepath.Join(work, StatsDump)); err == nil {
		if f := time.Duration(st.GetFrozenTime()) * time.Microsecond; o.Lazy == nil && f > res.Frozen {
			res.Frozen = f
		}
		if res.Freezing == 0 {
			res.Freezing = time.Duration(st.GetFreezingTime()) * time.Microsecond
		}
		res.MemDump = time.Duration(st.GetMemdumpTime()) * time.Microsecond
		res.MemWrite = time.Duration(st.GetMemwriteTime()) * time.Microsecond
		res.PagesWritten = st.GetPagesWritten()
	} else {
		o.Logger.Warn("no dump statistics", "err", err)
	}
	if o.Lazy != nil {
		// The tree was killed once its memory was fetched: it runs on
		// where it was restored.
		res.Total = time.Since(start)
		o.Logger.Info("lazy checkpoint served", "pid", t.Pid, "path", res.Path, "frozen", res.Frozen, "serve", res.Serve, "total", res.Total)
		return res, nil
	}
	if err := ctx.Err(); err != nil {
		return res, errors.Join(fmt.Errorf("checkpoint pid %d: %w", t.Pid, err), ensureRunning(o, t, before, frozenBefore))
	}
	if err := archive(); err != nil {
		return res, errors.Join(err, ensureRunning(o, t, before, frozenBefore))
	}
	if o.Progress != nil {
		o.Progress(Progress{Phase: PhaseDone, Bytes: res.Size})
	}
	res.Total = time.Since(start)
	o.Logger.Info("checkpoint written", "pid", t.Pid, "path", res.Path, "bytes", res.Size,
		"frozen", res.Frozen, "total", res.Total)
	return res, ensureRunning(o, t, before, frozenBefore)
}

// networkLock picks how CRIU locks the traffic of a network namespace it
// dumps (a container's): with iptables, CRIU's default, where
// iptables-restore is on PATH (CRIU runs it, and ip6tables-restore);
// else with nftables, through the libnftables CRIU links, as in nodeshim's
// image, which carries CRIU but no iptables. Restore unlocks with the
// dump's method, which CRIU records in the images' inventory.
func networkLock(lookPath func(string) (string, error)) *rpc.CriuNetworkLockMethod {
	if _, err := lookPath("iptables-restore"); err == nil {
		return rpc.CriuNetworkLockMethod_IPTABLES.Enum()
	}
	return rpc.CriuNetworkLockMethod_NFTABLES.Enum()
}

// dump runs CRIU's dump request for t into images. For a lazy dump,
// statusFd is the pipe CRIU signals its page server's start on. preDump,
// if set, runs at CRIU's pre-dump notification, before CRIU freezes the
// tree.
func dump(ctx context.Context, t Target, o Options, work, images string, statusFd int, preDump func(), round dumpRound) error {
	imgDir, err := os.Open(images)
	if err != nil {
		return fmt.Errorf("open %s: %w", images, err)
	}
	defer imgDir.Close()
	workDir, err := os.Open(work)
	if err != nil {
		return fmt.Errorf("open %s: %w", work, err)
	}
	defer workDir.Close()

	// CRIU opens the directories as /proc/<our pid>/fd/<fd>.
	opts := &rpc.CriuOpts{
		ImagesDirFd:     proto.Int32(int32(imgDir.Fd())),
		WorkDirFd:       proto.Int32(int32(workDir.Fd())),
		Pid:             proto.Int32(int32(t.Pid)),
		LeaveRunning:    proto.Bool(true),
		LogLevel:        proto.Int32(4),
		LogFile:         proto.String(DumpLog),
		TcpEstablished:  proto.Bool(o.TCPEstablished),
		ExtUnixSk:       proto.Bool(o.ExtUnixSockets),
		FileLocks:       proto.Bool(o.FileLocks),
		ShellJob:        proto.Bool(o.ShellJob),
		NotifyScripts:   proto.Bool(true),
		OrphanPtsMaster: proto.Bool(t.Container.OrphanPtsMaster),
		External:        t.Container.External,
		NetworkLock:     networkLock(exec.LookPath),
	}
	for _, m := range t.Container.ExtMounts {
		opts.ExtMnt = append(opts.ExtMnt, &rpc.ExtMountMap{Key: proto.String(m.Key), Val: proto.String(m.Val)})
	}
	if t.Container.Root != "" {
		opts.Root = proto.String(t.Container.Root)
	}
	if !o.TCPEstablished {
		// CRIU locks a dumped network namespace (iptables rules that drop
		// every packet) so that TCP connections cannot change while their
		// state is read, and unlocks it before it thaws the tree: the
		// unlock runs iptables-restore in the namespace, measured here at
		// 60-80 ms of the frozen time. Without --tcp-established CRIU
		// dumps no connection state, and the tree runs on in the same
		// namespace, so the lock protects nothing (podman pays no unlock:
		// it stops the container).
		opts.NetworkLock = rpc.CriuNetworkLockMethod_SKIP.Enum()
	}
	if t.Container.ManageCgroups {
		opts.ManageCgroups = proto.Bool(true)
		opts.ManageCgroupsMode = rpc.CriuCgMode_SOFT.Enum()
	}
	if t.Container.FreezeCgroup != "" {
		opts.FreezeCgroup = proto.String(t.Container.FreezeCgroup)
	}
	if o.Lazy != nil {
		opts.LazyPages = proto.Bool(true)
		opts.LeaveRunning = proto.Bool(false)
		opts.Ps = &rpc.CriuPageServerInfo{Address: proto.String(o.Lazy.Address), Port: proto.Int32(int32(o.Lazy.Port))}
		opts.StatusFd = proto.Int32(int32(statusFd))
		if t := o.PageServerTLS; t != nil {
			opts.Tls = proto.Bool(true)
			opts.TlsCacert, opts.TlsCert, opts.TlsKey = proto.String(t.CACert), proto.String(t.Cert), proto.String(t.Key)
		}
	}

	reqType := round.apply(opts)

	s, err := startSwrk(o.Binary, o.HardwareBreakpoints)
	if err != nil {
		return err
	}
	stopProgress := watchProgress(o, images, treeRSS(o.ProcRoot, t.Pid))
	stopWriteback := func() {}
	if o.EarlyWriteback > 0 {
		stopWriteback = startWriteback(images, o.EarlyWriteback)
	}
	_, callErr := s.call(ctx, &rpc.CriuReq{Type: reqType.Enum(), Opts: opts}, func(n *rpc.CriuNotify) error {
		o.Logger.Debug("criu notification", "script", n.GetScript())
		if n.GetScript() == "pre-dump" && preDump != nil {
			preDump()
		}
		// Each notification is a point where CRIU can still back out
		// cleanly, so a deadline is checked here too.
		return ctx.Err()
	})
	stopProgress()
	stopWriteback()
	killed := s.close(o.KillGrace)
	if killed {
		o.Logger.Warn("criu did not abort within the grace period and was killed", "pid", t.Pid, "grace", o.KillGrace)
	}
	if callErr != nil {
		msg := logErrors(filepath.Join(work, opts.GetLogFile()))
		if ctx.Err() != nil {
			return fmt.Errorf("checkpoint pid %d: %w (criu killed: %v)", t.Pid, ctx.Err(), killed)
		}
		return fmt.Errorf("checkpoint pid %d: %w; %s: %s", t.Pid, callErr, opts.GetLogFile(), msg)
	}
	return nil
}

// watchProgress reports the bytes CRIU has written to images until the
// returned function is called.
func watchProgress(o Options, images string, total int64) func() {
	if o.Progress == nil {
		return func() {}
	}
	o.Progress(Progress{Phase: PhaseFreezing, Total: total})
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(o.ProgressInterval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if n := dirSize(images); n > 0 {
					o.Progress(Progress{Phase: PhaseDumping, Bytes: n, Total: total})
				}
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

func dirSize(dir string) int64 {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}

// logErrors returns CRIU's "Error" lines from a log and the lines of the
// programs it ran, or its last lines.
func logErrors(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(unreadable: %v)", err)
	}
	var errs []string
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, l := range lines {
		// CRIU's own lines start with a "(seconds)" stamp and its
		// parasite's with "pie:"; any other line is from a program CRIU
		// ran (tar, iptables-restore), which logs its reason there.
		external := l != "" && !strings.HasPrefix(l, "(") && !strings.HasPrefix(l, "pie:")
		if (strings.Contains(l, "Error (") || external) && !isRlimitNoise(l) {
			errs = append(errs, strings.TrimSpace(l))
		}
	}
	if len(errs) == 0 {
		if len(lines) > 3 {
			lines = lines[len(lines)-3:]
		}
		errs = lines
	}
	if len(errs) > 8 {
		errs = errs[len(errs)-8:]
	}
	return strings.Join(errs, "; ")
}

// isRlimitNoise recognises the error CRIU logs, and goes on from, when it
// may not raise RLIMIT_NOFILE (no CAP_SYS_RESOURCE).
func isRlimitNoise(l string) bool {
	return strings.Contains(l, "Can't setup RLIMIT_NOFILE")
}

// ReadDumpStats reads CRIU's stats-dump image at path (the work
// directory's, or an archive's stats-dump, which runtimes copy as CRIU
// wrote it): two magics, a length and a StatsEntry (go-criu's
// stats.proto). Its frozen_time is how long the tree was frozen.
func ReadDumpStats(path string) (*stats.DumpStatsEntry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	st, err := parseStats(b)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	if st.GetDump() == nil {
		return nil, fmt.Errorf("parse %s: no dump statistics", path)
	}
	return st.GetDump(), nil
}

// ArchiveDumpStats reads the dump statistics (stats-dump) of the
// checkpoint archive at path: how long the container was frozen, the pages
// written.
func ArchiveDumpStats(path string) (*stats.DumpStatsEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("archive %s: no %s", path, StatsDump)
		}
		if err != nil {
			return nil, fmt.Errorf("read archive %s: %w", path, err)
		}
		if filepath.Clean(h.Name) != StatsDump {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(tr, 1<<20))
		if err != nil {
			return nil, fmt.Errorf("read %s of archive %s: %w", StatsDump, path, err)
		}
		st, err := parseStats(b)
		if err != nil {
			return nil, fmt.Errorf("parse %s of archive %s: %w", StatsDump, path, err)
		}
		if st.GetDump() == nil {
			return nil, fmt.Errorf("parse %s of archive %s: no dump statistics", StatsDump, path)
		}
		return st.GetDump(), nil
	}
}

func parseStats(b []byte) (*stats.StatsEntry, error) {
	if len(b) < stats.PayloadOffset {
		return nil, fmt.Errorf("%d bytes, shorter than the header", len(b))
	}
	le := func(off int) uint32 {
		return uint32(b[off]) | uint32(b[off+1])<<8 | uint32(b[off+2])<<16 | uint32(b[off+3])<<24
	}
	if m := le(stats.PrimaryMagicOffset); m != stats.ImgServiceMagic {
		return nil, fmt.Errorf("magic %#x, want %#x", m, stats.ImgServiceMagic)
	}
	if m := le(stats.SecondaryMagicOffset); m != stats.StatsMagic {
		return nil, fmt.Errorf("stats magic %#x, want %#x", m, stats.StatsMagic)
	}
	size := uint64(le(stats.SizeOffset))
	if size > uint64(len(b)-stats.PayloadOffset) {
		return nil, fmt.Errorf("payload of %d bytes, file has %d", size, len(b)-stats.PayloadOffset)
	}
	st := &stats.StatsEntry{}
	if err := proto.Unmarshal(b[stats.PayloadOffset:stats.PayloadOffset+int(size)], st); err != nil {
		return nil, err
	}
	return st, nil
}

// ensureRunning checks that t's tree runs on, unfrozen and untraced, after
// a checkpoint. A freeze cgroup left frozen by a killed CRIU is thawed and
// a tree left stopped is continued, unless they were so before. It returns
// nil or an error wrapping ErrTargetLost.
func ensureRunning(o Options, t Target, before ProcState, frozenBefore bool) error {
	pid := t.Pid
	if cg := t.Container.FreezeCgroup; cg != "" && !frozenBefore && cgroupFrozen(cg) {
		o.Logger.Warn("freeze cgroup left frozen; thawing it", "pid", pid, "cgroup", cg)
		if err := thawCgroup(cg); err != nil {
			return fmt.Errorf("pid %d: cgroup %s left frozen, thaw: %w: %w", pid, cg, err, ErrTargetLost)
		}
	}
	st, err := ReadProcState(o.ProcRoot, pid)
	if err != nil || st.Gone() {
		return fmt.Errorf("pid %d after checkpoint: %w (%v)", pid, ErrTargetLost, errOr(err, st))
	}
	if st.TracerPid != 0 {
		// CRIU has exited by now (we waited for it), so a tracer is
		// someone else's; report it rather than fight it.
		return fmt.Errorf("pid %d after checkpoint is traced by pid %d: %w", pid, st.TracerPid, ErrTargetLost)
	}
	if st.Stopped() && !before.Stopped() {
		o.Logger.Warn("target left stopped; sending SIGCONT", "pid", pid, "state", st.String())
		if err := unix.Kill(pid, unix.SIGCONT); err != nil {
			return fmt.Errorf("pid %d left stopped, SIGCONT: %w: %w", pid, err, ErrTargetLost)
		}
	}
	return nil
}

func errOr(err error, st ProcState) string {
	if err != nil {
		return err.Error()
	}
	return st.String()
}

// writeArchive writes the tar of a finished dump to a private temp file in
// dir and publishes it under the first free name. On error nothing is left
// behind.
func writeArchive(ctx context.Context, o Options, inPlace *bool, dir, work, images string, meta []archive.MetaFile, name func(int) string) (path string, size int64, fsync time.Duration, err error) {
	// An encrypted archive is written through seal's stream; a signed
	// one may be built in place and hashed after.
	if big := largestPages(images); big != "" && !o.CopyArchive && len(o.Seal.Recipients) == 0 {
		path, size, fsync, err = writeArchiveInPlace(ctx, o, dir, work, images, big, meta, name)
		if !errors.Is(err, errNoInPlace) {
			*inPlace = err == nil
			if err == nil {
				if err := seal.SignFile(path, o.Seal); err != nil {
					return "", 0, 0, errors.Join(err, os.Remove(path))
				}
			}
			return path, size, fsync, err
		}
		o.Logger.Debug("copying the images into the archive", "reason", err)
	}
	f, err := createExclusive(dir)
	if err != nil {
		return "", 0, 0, err
	}
	tmp := f.Name()
	defer func() {
		if f != nil {
			f.Close()
		}
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	aw := archive.NewWriter(ctx, f, 0, archivingProgress(o), o.ProgressInterval)
	var sw *seal.Writer
	if o.Seal.Enabled() {
		if sw, err = seal.NewWriter(f, o.Seal); err != nil {
			return "", 0, 0, fmt.Errorf("write %s: %w", tmp, err)
		}
		// Ends the writer's hashing goroutine on every path; after the
		// Close below it returns that Close's result.
		defer sw.Close() //nolint:errcheck // the success path checks its own Close
		aw = archive.NewStreamWriter(ctx, sw, archivingProgress(o), o.ProgressInterval)
	}
	if err := archive.WriteTree(aw, work, images, meta); err != nil {
		return "", 0, 0, fmt.Errorf("write %s: %w", tmp, err)
	}
	size = aw.Offset()
	if sw != nil {
		if err := sw.Close(); err != nil {
			return "", 0, 0, fmt.Errorf("write %s: %w", tmp, err)
		}
		size = sw.Stored()
	}
	if o.Progress != nil {
		o.Progress(Progress{Phase: PhaseSyncing, Bytes: aw.Offset()})
	}
	syncStart := time.Now()
	if err := f.Sync(); err != nil {
		return "", 0, 0, fmt.Errorf("fsync %s: %w", tmp, err)
	}
	fsync = time.Since(syncStart)
	if err := f.Close(); err != nil {
		f = nil
		return "", 0, 0, fmt.Errorf("close %s: %w", tmp, err)
	}
	f = nil
	if err := ctx.Err(); err != nil {
		return "", 0, 0, err
	}
	final, err := publish(dir, tmp, name)
	if err != nil {
		return "", 0, 0, err
	}
	if sw != nil {
		if err := sw.Seal(final); err != nil {
			return "", 0, 0, errors.Join(err, os.Remove(final))
		}
	}
	return final, size, fsync, nil
}

// archivingProgress reports the archive's bytes as PhaseArchiving to
// o.Progress, or is nil without one.
func archivingProgress(o Options) func(int64) {
	if o.Progress == nil {
		return nil
	}
	return func(n int64) { o.Progress(Progress{Phase: PhaseArchiving, Bytes: n}) }
}

// cgroupFrozen reports whether the freezer cgroup dir is frozen or
// freezing: cgroup v1's freezer.state (Documentation/admin-guide/
// cgroup-v1/freezer-subsystem.rst) or cgroup v2's cgroup.freeze.
func cgroupFrozen(dir string) bool {
	if dir == "" {
		return false
	}
	if b, err := os.ReadFile(filepath.Join(dir, "freezer.state")); err == nil {
		return strings.TrimSpace(string(b)) != "THAWED"
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cgroup.freeze")); err == nil {
		return strings.TrimSpace(string(b)) == "1"
	}
	return false
}

// thawCgroup thaws the freezer cgroup dir (v1 or v2).
func thawCgroup(dir string) error { return workentry.Thaw(dir) }
