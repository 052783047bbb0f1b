package criu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"google.golang.org/protobuf/proto"

	"github.com/nodeshim/nodeshim/criu/archive"
	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// ErrPreDumpUnsupported is returned, wrapped with CRIU's own message, when
// pre-dump rounds (Options.PreDump) are asked for on a kernel that does not
// track dirty memory: CRIU's mem_dirty_track, the soft-dirty bits of
// /proc/PID/pagemap, needs CONFIG_MEM_SOFT_DIRTY. A plain checkpoint still
// works there. It is of class errdefs.ErrNotSupported.
var ErrPreDumpUnsupported = errdefs.New(errdefs.ErrNotSupported,
	"pre-dump (iterative pre-copy) not supported here: the kernel does not track dirty memory (criu check --feature mem_dirty_track, CONFIG_MEM_SOFT_DIRTY)")

// MemDirtyTrack is the `criu check --feature` name of the kernel feature
// pre-dump rounds need.
const MemDirtyTrack = "mem_dirty_track"

// MaxPreDump bounds Options.PreDump: each round adds a directory of images
// that the restore reads through, and past a few rounds a working set that
// keeps dirtying its memory gains nothing.
const MaxPreDump = 8

// parentLink is the entry of an images directory that CRIU follows to the
// images of the previous round (criu/image.c's CR_PARENT_LINK). In an
// archive it is a directory: CRIU opens it the same way.
const parentLink = archive.ParentDir

// preDumpLog is the CRIU log of pre-dump round n, in the work directory.
func preDumpLog(n int) string { return "pre-dump-" + strconv.Itoa(n) + ".log" }

// preDumpDir is the images directory of pre-dump round n, in the work
// directory.
func preDumpDir(n int) string { return "pre-dump-" + strconv.Itoa(n) }

// CheckPreDump says whether bin can run pre-dump rounds on this kernel:
// nil, or an error wrapping ErrPreDumpUnsupported with CRIU's message. An
// ended ctx is returned as such, not as unsupported.
func CheckPreDump(ctx context.Context, bin Binary) error {
	err := bin.CheckFeature(ctx, MemDirtyTrack)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil || !errors.Is(err, ErrCheckFailed) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrPreDumpUnsupported, err)
}

// dumpRound says which CRIU request a dump runs: the final dump (the zero
// value) or pre-dump round n; parent is the previous round's images
// directory relative to this round's, empty for none.
type dumpRound struct {
	pre    int
	parent string
}

// apply sets r's request type and options.
func (r dumpRound) apply(opts *rpc.CriuOpts) rpc.CriuReqType {
	if r.parent != "" {
		opts.ParentImg = proto.String(r.parent)
	}
	if r.pre > 0 || r.parent != "" {
		opts.TrackMem = proto.Bool(true)
	}
	if r.pre > 0 {
		opts.LogFile = proto.String(preDumpLog(r.pre))
		return rpc.CriuReqType_PRE_DUMP
	}
	return rpc.CriuReqType_DUMP
}

// preDumpRounds runs o.PreDump rounds of `criu pre-dump` into their own
// directories of work while t runs on, each round writing only what the
// previous one left unchanged, and returns the last round's directory
// relative to images, for the final dump's --prev-images-dir. It adds the
// rounds' own frozen times (CRIU freezes the tree while it collects the
// dirty pages of a round) to res.PreDumpFrozen.
func preDumpRounds(ctx context.Context, t Target, o Options, work string, res *Result) (string, error) {
	// Progress is the final dump's: the rounds run with the target
	// running, before the dump that freezes it.
	ro := o
	ro.Progress = nil
	ro.EarlyWriteback = 0
	for n := 1; n <= o.PreDump; n++ {
		dir := filepath.Join(work, preDumpDir(n))
		if err := os.Mkdir(dir, 0o700); err != nil {
			return "", fmt.Errorf("create %s: %w", dir, err)
		}
		r := dumpRound{pre: n}
		if n > 1 {
			r.parent = filepath.Join("..", preDumpDir(n-1))
		}
		if err := dump(ctx, t, ro, work, dir, -1, nil, r); err != nil {
			return "", fmt.Errorf("pre-dump round %d of %d: %w", n, o.PreDump, err)
		}
		// CRIU writes a pre-dump's statistics as a dump's (stats.c names
		// only "dump" and "restore"), in the work directory: read, then
		// removed, so that the final dump's cannot be taken for a round's.
		stats := filepath.Join(work, StatsDump)
		if st, err := ReadDumpStats(stats); err == nil {
			res.PreDumpFrozen += time.Duration(st.GetFrozenTime()) * time.Microsecond
		}
		if err := os.Remove(stats); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("pre-dump round %d of %d: %w", n, o.PreDump, err)
		}
		o.Logger.Debug("pre-dump round written", "pid", t.Pid, "round", n, "bytes", dirSize(dir))
	}
	return filepath.Join("..", preDumpDir(o.PreDump)), nil
}

// nestPreDumps moves the rounds' directories of work into images, each in
// place of the parent symlink CRIU left in the round after it: images/parent
// is the last round, images/parent/parent the one before, and so on. The
// archive then holds the chain as directories, which CRIU's restore opens
// as it opens the symlinks, and which no symlink of the archive has to
// reach.
func nestPreDumps(work, images string, rounds int) error {
	cur := images
	for n := rounds; n >= 1; n-- {
		link := filepath.Join(cur, parentLink)
		fi, err := os.Lstat(link)
		if err != nil {
			return fmt.Errorf("pre-dump round %d: %w", n, err)
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			return fmt.Errorf("pre-dump round %d: %s is not CRIU's parent symlink (%s)", n, link, fi.Mode())
		}
		if err := os.Remove(link); err != nil {
			return fmt.Errorf("pre-dump round %d: %w", n, err)
		}
		if err := os.Rename(filepath.Join(work, preDumpDir(n)), link); err != nil {
			return fmt.Errorf("pre-dump round %d: %w", n, err)
		}
		cur = link
	}
	if _, err := os.Lstat(filepath.Join(cur, parentLink)); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pre-dump round 1 has a parent: %v", err)
	}
	return nil
}
