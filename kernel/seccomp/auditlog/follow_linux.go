package auditlog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// KmsgPath is the kernel log's device.
const KmsgPath = "/dev/kmsg"

// maxRecord is the largest kmsg record a read returns whole
// (CONSOLE_EXT_LOG_MAX, 8 KiB, in kernel/printk/printk.c).
const maxRecord = 8192

// Follower reads the seccomp records the kernel logs from now on.
type Follower struct {
	fd   int
	file *os.File
	// Lost counts the records the kernel log overwrote before they were
	// read (EPIPE from read(2)).
	Lost atomic.Uint64
	// Malformed counts seccomp records that did not decode.
	Malformed atomic.Uint64
	// Suppressed counts the audit records the kernel did not print:
	// kauditd prints them through printk_ratelimit() (kernel/audit.c,
	// kauditd_printk_skb; kernel.printk_ratelimit_burst records every
	// kernel.printk_ratelimit seconds, 10 every 5 s by default) and logs
	// "kauditd_printk_skb: N callbacks suppressed" for the rest.
	Suppressed atomic.Uint64
}

// Open opens path (KmsgPath, or a test's file of kmsg records) and,
// for the device, moves to its end: records logged before Open are not
// read. It needs CAP_SYSLOG (or kernel.dmesg_restrict=0) for the device.
func Open(path string) (*Follower, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	fd := int(f.Fd())
	if path == KmsgPath {
		// SEEK_END on /dev/kmsg moves to the next record to be logged
		// (devkmsg_llseek).
		if _, err := unix.Seek(fd, 0, unix.SEEK_END); err != nil {
			f.Close()
			return nil, fmt.Errorf("seek to the end of %s: %w", path, err)
		}
	}
	return &Follower{fd: fd, file: f}, nil
}

// Close closes the log.
func (fl *Follower) Close() error { return fl.file.Close() }

// Run sends each seccomp record logged until ctx is done on out, and
// returns nil then; a read error other than a lost record ends it with
// that error. It waits for records with poll(2) in steps of at most
// 200 ms, so that ctx is seen promptly.
func (fl *Follower) Run(ctx context.Context, out chan<- Record) error {
	buf := make([]byte, maxRecord)
	fds := []unix.PollFd{{Fd: int32(fl.fd), Events: unix.POLLIN}}
	for ctx.Err() == nil {
		n, err := unix.Read(fl.fd, buf)
		switch {
		case errors.Is(err, unix.EAGAIN):
			if _, err := unix.Poll(fds, 200); err != nil && !errors.Is(err, unix.EINTR) {
				return fmt.Errorf("poll %s: %w", fl.file.Name(), err)
			}
			continue
		case errors.Is(err, unix.EPIPE):
			// The reader fell behind and records were overwritten; the
			// next read returns the oldest one still there.
			fl.Lost.Add(1)
			continue
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return fmt.Errorf("read %s: %w", fl.file.Name(), err)
		case n == 0:
			// A regular file at its end: wait as for the device.
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		for _, line := range splitRecords(buf[:n]) {
			if n, ok := suppressed(line); ok {
				fl.Suppressed.Add(n)
				continue
			}
			r, err := Parse(line)
			if errors.Is(err, ErrNotSeccomp) {
				continue
			}
			if err != nil {
				fl.Malformed.Add(1)
				continue
			}
			select {
			case out <- r:
			case <-ctx.Done():
				return nil
			}
		}
	}
	return nil
}

// splitRecords splits what one read returned into lines: one kmsg record
// (with its continuation lines, which start with a space and are
// dropped), or the lines of a file.
func splitRecords(b []byte) []string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l == "" || l[0] == ' ' {
			continue
		}
		out = append(out, l)
	}
	return out
}

// suppressed reads kauditd's "kauditd_printk_skb: N callbacks suppressed".
func suppressed(line string) (uint64, bool) {
	_, rest, ok := strings.Cut(line, "kauditd_printk_skb: ")
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, " callbacks suppressed")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(num, 10, 64)
	return n, err == nil
}
