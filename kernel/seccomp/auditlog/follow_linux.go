package auditlog

import (
	"context"
	"encoding/binary"
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

// Netlink names the audit netlink socket's read-only multicast group
// (AUDIT_NLGRP_READLOG, Linux 3.16) as a source for Open: kauditd sends
// every record there, besides the audit daemon or the kernel log, without
// the kernel log's rate limit. It needs CAP_AUDIT_READ.
const Netlink = "netlink:audit-readlog"

// Follower reads the seccomp records the kernel logs from now on.
type Follower struct {
	fd   int
	file *os.File
	// netlink is set when fd is an audit netlink socket.
	netlink bool
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
	if path == Netlink {
		return openNetlink()
	}
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
		case errors.Is(err, unix.EPIPE), errors.Is(err, unix.ENOBUFS):
			// The reader fell behind and records were overwritten (kmsg)
			// or dropped (the socket's buffer); reading goes on.
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
		lines := splitRecords
		if fl.netlink {
			lines = netlinkRecords
		}
		for _, line := range lines(buf[:n]) {
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

// openNetlink joins the audit netlink socket's read-only multicast group.
func openNetlink() (*Follower, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_AUDIT)
	if err != nil {
		return nil, fmt.Errorf("audit netlink socket: %w", err)
	}
	// AUDIT_NLGRP_READLOG is group 1: bit 0 of the groups mask.
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1 << (unix.AUDIT_NLGRP_READLOG - 1)}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("join the audit netlink read-log group (needs CAP_AUDIT_READ): %w", err)
	}
	// A larger buffer rides out bursts of records between reads.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20)
	return &Follower{fd: fd, file: os.NewFile(uintptr(fd), Netlink), netlink: true}, nil
}

// netlinkRecords turns the audit netlink messages of one read into lines
// as the kernel log prints them ("type=1326 audit(...): ..."). The audit
// subsystem does not pad nlmsg_len to NLMSG_ALIGNTO (kernel/audit.c
// sizes the message by its text), so syscall.ParseNetlinkMessage, which
// wants the padding, refuses a record whose length is not a multiple of 4:
// the headers are walked here, a message taking its length, the next
// starting at the aligned offset.
func netlinkRecords(b []byte) []string {
	var out []string
	for len(b) >= unix.NLMSG_HDRLEN {
		n := int(binary.NativeEndian.Uint32(b[0:4]))
		typ := binary.NativeEndian.Uint16(b[4:6])
		if n < unix.NLMSG_HDRLEN {
			break
		}
		n = min(n, len(b))
		if typ == TypeSeccomp {
			out = append(out, "type="+strconv.Itoa(int(typ))+" "+strings.TrimRight(string(b[unix.NLMSG_HDRLEN:n]), "\x00\n"))
		}
		next := (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
		if next >= len(b) {
			break
		}
		b = b[next:]
	}
	return out
}
