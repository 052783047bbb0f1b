package criu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// fillIdentity adds the inode, device and change time of fi to id.
func fillIdentity(id *binaryIdentity, fi os.FileInfo) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.Inode = st.Ino
		id.Device = st.Dev
		id.ChTime = st.Ctim.Nano()
	}
}

// staleKerndatTmp is how old a criu.kdat.tmp on a tmpfs must be to be
// taken for the leftover of a criu killed while saving: a live save opens
// it, writes about a kilobyte and renames it within microseconds.
const staleKerndatTmp = time.Minute

// prepareKerndat reports whether a criu run as root will keep what it
// learns about the kernel in dir, which is a tmpfs when onTmpfs is set, for
// the runs after it, and has not done so yet, after clearing what would
// stop it or mislead CRIU; note says what was cleared, or why nothing is
// kept.
//
// CRIU 4.1 (criu/kerndat.c) saves its facts only when dir is a tmpfs:
// kerndat_save_cache creates dir/criu.kdat.tmp with O_EXCL, gives up when
// it exists, and renames it to criu.kdat. On a tmpfs, a temporary file
// dated before the boot or older than staleKerndatTmp is the leftover of a
// criu killed while saving, which would stop every save until the next
// boot: it is removed. On any other filesystem CRIU keeps nothing (it
// leaves an empty criu.kdat.tmp behind at every run, since its error path
// unlinks criu.kdat instead), so every criu run gathers the facts itself.
// kerndat_try_load_cache checks only a loaded file's size and magic numbers,
// not the boot, so a criu.kdat dated before the boot on such a filesystem
// (which survives reboots, unlike a tmpfs) would hand CRIU facts about an
// earlier kernel: it is removed.
func prepareKerndat(dir string, onTmpfs bool, boot, now time.Time) (keeps bool, note string) {
	kdat, tmp := filepath.Join(dir, "criu.kdat"), filepath.Join(dir, "criu.kdat.tmp")
	if !onTmpfs {
		if fi, err := os.Lstat(kdat); err == nil && fi.ModTime().Before(boot) {
			if err := os.Remove(kdat); err != nil {
				return false, fmt.Sprintf("%s is from before this boot, on a filesystem that is not a tmpfs, and could not be removed: %v", kdat, err)
			}
			return false, fmt.Sprintf("removed %s, dated %s, before this boot: criu would have loaded its facts about an earlier kernel", kdat, fi.ModTime().UTC().Format(time.RFC3339))
		}
		return false, ""
	}
	if fi, err := os.Lstat(tmp); err == nil {
		at := fi.ModTime()
		if !at.Before(boot) && now.Sub(at) < staleKerndatTmp {
			return false, "" // a criu is saving them now
		}
		if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, fmt.Sprintf("stale %s (a criu killed while saving its kernel facts left it; no criu saves them while it exists) could not be removed: %v", tmp, err)
		}
		note = fmt.Sprintf("removed stale %s, dated %s: a criu killed while saving its kernel facts left it, and no criu saves them while it exists", tmp, at.UTC().Format(time.RFC3339))
	}
	if _, err := os.Lstat(kdat); !errors.Is(err, os.ErrNotExist) {
		return false, note
	}
	return true, note
}

// bootTime is when this machine booted, by CLOCK_BOOTTIME (which counts
// suspend) against now.
func bootTime(now time.Time) (time.Time, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return time.Time{}, fmt.Errorf("clock_gettime(CLOCK_BOOTTIME): %w", err)
	}
	return now.Add(-time.Duration(ts.Nano())), nil
}

// kerndatRun prepares dir for the criu runs of one report (prepareKerndat)
// and says how to start them: when dir keeps CRIU's kernel facts, or can
// once its own criu.kdat is saved, as they are; when it cannot (not a
// tmpfs), through a privateRun with a tmpfs of its own on dir, so that
// they are gathered once per report instead of once per criu process.
// stop ends the privateRun, if any; note is for criu.check's evidence.
func kerndatRun(dir string, now time.Time) (checkFirst bool, start starter, stop func(), note string) {
	boot, err := bootTime(now)
	if err != nil {
		return false, nil, func() {}, err.Error()
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, nil, func() {}, fmt.Sprintf("criu keeps no kernel facts: %v", err)
	}
	onTmpfs := st.Type == unix.TMPFS_MAGIC
	keeps, note := prepareKerndat(dir, onTmpfs, boot, now)
	if onTmpfs {
		return keeps, nil, func() {}, note
	}
	pr, err := newPrivateRun(dir)
	if err != nil {
		return false, nil, func() {}, joinNotes(note, fmt.Sprintf("%s is not a tmpfs, so criu keeps no kernel facts there, and none of its own could be made: %v", dir, err))
	}
	return true, pr.start, pr.close, note
}
