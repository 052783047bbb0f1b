package criu

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/criu/archive"
)

// errNoInPlace says that the archive cannot be built around CRIU's pages
// image on this filesystem; the caller copies instead.
var errNoInPlace = errors.New("in-place archive not possible")

// inPlaceMin is the smallest pages image worth building the archive around.
const inPlaceMin = 1 << 20

// smallImage is the largest image read into memory for the archive's head.
const smallImage = 16 << 20

// largestPages returns the largest pages-*.img in images, if it is at
// least inPlaceMin bytes.
func largestPages(images string) string {
	ents, err := os.ReadDir(images)
	if err != nil {
		return ""
	}
	best, bestSize := "", int64(inPlaceMin-1)
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), "pages-") || !strings.HasSuffix(e.Name(), ".img") {
			continue
		}
		if fi, err := e.Info(); err == nil && fi.Size() > bestSize {
			best, bestSize = e.Name(), fi.Size()
		}
	}
	return best
}

// writeArchiveInPlace turns CRIU's largest pages image into the archive
// instead of copying it: FALLOC_FL_INSERT_RANGE (ext4 and XFS, Linux 4.1)
// opens a block-aligned gap at the start of the file, which receives
// checkpoint/, the small images and the tar header of the pages image,
// whose data then starts exactly where CRIU wrote it; the remaining
// members are appended. The pages are written to disk once. The
// file lives in the private 0700 work directory until it is fsynced and
// renamed into place, like a temp archive.
//
// It returns errNoInPlace, with the pages image untouched, when the
// filesystem cannot insert a range.
func writeArchiveInPlace(ctx context.Context, o Options, dir, work, images, big string, meta []archive.MetaFile, name func(int) string) (path string, size int64, fsync time.Duration, err error) {
	bigPath := filepath.Join(images, big)
	f, err := os.OpenFile(bigPath, os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", 0, 0, fmt.Errorf("%w: open %s: %v", errNoInPlace, bigPath, err)
	}
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	fi, err := f.Stat()
	if err != nil {
		return "", 0, 0, fmt.Errorf("%w: stat %s: %v", errNoInPlace, bigPath, err)
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return "", 0, 0, fmt.Errorf("%w: statfs %s: %v", errNoInPlace, bigPath, err)
	}
	bs := int64(st.Bsize)
	if bs <= 0 || bs%archive.BlockSize != 0 {
		return "", 0, 0, fmt.Errorf("%w: block size %d", errNoInPlace, bs)
	}

	// The head: checkpoint/ and every small image but the pages image.
	now := time.Now()
	var head bytes.Buffer
	if err := archive.AppendMember(&head, &tar.Header{Typeflag: tar.TypeDir, Name: ImagesDir + "/", Mode: 0o700, ModTime: now}, nil); err != nil {
		return "", 0, 0, err
	}
	ents, err := os.ReadDir(images)
	if err != nil {
		return "", 0, 0, err
	}
	var tail []string // images too large for the head, appended after
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		if e.Type().IsRegular() && e.Name() != big {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(images, n)
		info, err := os.Stat(p)
		if err != nil {
			return "", 0, 0, err
		}
		if info.Size() > smallImage {
			tail = append(tail, n)
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return "", 0, 0, err
		}
		if err := archive.AppendMember(&head, &tar.Header{Typeflag: tar.TypeReg, Name: ImagesDir + "/" + n, Mode: 0o600, Size: int64(len(data)), ModTime: info.ModTime()}, data); err != nil {
			return "", 0, 0, err
		}
	}
	// The pages image's header must end on a block boundary of the file
	// system: a PAX "comment" record (which readers ignore) fills the gap.
	s := int64(head.Len())
	gap := roundUp(s+3*archive.BlockSize, bs)
	pax := gap - s - 2*archive.BlockSize // the PAX record's data, whole blocks
	digits := len(strconv.FormatInt(pax, 10))
	filler := pax - int64(digits) - int64(len(" comment=\n"))
	hdr := &tar.Header{
		Typeflag: tar.TypeReg, Name: ImagesDir + "/" + big, Mode: 0o600, Size: fi.Size(),
		ModTime: fi.ModTime().Truncate(time.Second), Format: tar.FormatPAX,
		PAXRecords: map[string]string{"comment": strings.Repeat("x", int(filler))},
	}
	hb, err := archive.HeaderBytes(hdr)
	if err != nil {
		return "", 0, 0, err
	}
	if s+int64(len(hb)) != gap {
		return "", 0, 0, fmt.Errorf("%w: head of %d bytes and header of %d do not fill %d", errNoInPlace, s, len(hb), gap)
	}
	head.Write(hb)

	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_INSERT_RANGE, 0, gap); err != nil {
		return "", 0, 0, fmt.Errorf("%w: insert %d bytes at the start of %s: %v", errNoInPlace, gap, bigPath, err)
	}
	// From here on the pages image is the archive being built.
	if _, err := f.WriteAt(head.Bytes(), 0); err != nil {
		return "", 0, 0, fmt.Errorf("write %s: %w", bigPath, err)
	}
	end, err := f.Seek(0, 2)
	if err != nil {
		return "", 0, 0, fmt.Errorf("seek %s: %w", bigPath, err)
	}
	aw := archive.NewWriter(ctx, f, end, archivingProgress(o), o.ProgressInterval)
	if err := aw.Pad(); err != nil {
		return "", 0, 0, fmt.Errorf("write %s: %w", bigPath, err)
	}
	for _, n := range tail {
		if err := aw.File(filepath.Join(images, n), ImagesDir+"/"+n); err != nil {
			return "", 0, 0, fmt.Errorf("write %s: %w", bigPath, err)
		}
	}
	if err := aw.Rest(work, meta); err != nil {
		return "", 0, 0, fmt.Errorf("write %s: %w", bigPath, err)
	}
	// CRIU made the file; the archive is root-only whatever its umask was.
	if err := f.Chmod(0o600); err != nil {
		return "", 0, 0, fmt.Errorf("chmod %s: %w", bigPath, err)
	}
	if o.Progress != nil {
		o.Progress(Progress{Phase: PhaseSyncing, Bytes: aw.Offset()})
	}
	syncStart := time.Now()
	if err := f.Sync(); err != nil {
		return "", 0, 0, fmt.Errorf("fsync %s: %w", bigPath, err)
	}
	fsync = time.Since(syncStart)
	err = f.Close()
	f = nil
	if err != nil {
		return "", 0, 0, fmt.Errorf("close %s: %w", bigPath, err)
	}
	if err := ctx.Err(); err != nil {
		return "", 0, 0, err
	}
	final, err := publish(dir, bigPath, name)
	if err != nil {
		return "", 0, 0, err
	}
	return final, aw.Offset(), fsync, nil
}

func roundUp(n, m int64) int64 { return (n + m - 1) / m * m }

// startWriteback starts the writeback of CRIU's pages images every
// interval while CRIU writes them (SYNC_FILE_RANGE_WRITE does not wait),
// so that the archive's final fsync finds most pages on disk. It returns
// the function that stops it.
func startWriteback(images string, interval time.Duration) func() {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		fds := map[string]*os.File{}
		defer func() {
			for _, f := range fds {
				f.Close()
			}
		}()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			ents, err := os.ReadDir(images)
			if err != nil {
				continue
			}
			for _, e := range ents {
				n := e.Name()
				if !strings.HasPrefix(n, "pages-") {
					continue
				}
				f, ok := fds[n]
				if !ok {
					if f, err = os.Open(filepath.Join(images, n)); err != nil {
						continue
					}
					fds[n] = f
				}
				_ = unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}
