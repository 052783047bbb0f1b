package criu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The ctnetlink message types (linux/netfilter/nfnetlink_conntrack.h) that
// x/sys/unix does not define.
const (
	ipctnlMsgCtGetStatsCPU = 4
	sizeofNfgenmsg         = 4
)

// kernelRelease is the running kernel's release, as uname -r prints it;
// empty when uname fails.
func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// askConntrack sends ctnetlink, in the current network namespace, the
// cheapest conntrack request there is (IPCTNL_MSG_CT_GET_STATS_CPU, a dump
// of per-CPU counters) and returns nil when it answers. A kernel without
// ctnetlink answers EINVAL (nfnetlink has no such subsystem); one without
// nfnetlink refuses the socket with EPROTONOSUPPORT. It needs CAP_NET_ADMIN.
func askConntrack(ctx context.Context) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return fmt.Errorf("socket NETLINK_NETFILTER: %w", err)
	}
	defer unix.Close(fd)
	timeout := time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	if timeout <= 0 {
		return ctx.Err()
	}
	tv := unix.NsecToTimeval(timeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("setsockopt SO_RCVTIMEO: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("bind netlink: %w", err)
	}
	const seq = 1
	msg := make([]byte, unix.NLMSG_HDRLEN+sizeofNfgenmsg)
	binary.NativeEndian.PutUint32(msg[0:4], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:6], unix.NFNL_SUBSYS_CTNETLINK<<8|ipctnlMsgCtGetStatsCPU)
	binary.NativeEndian.PutUint16(msg[6:8], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(msg[8:12], seq)
	msg[unix.NLMSG_HDRLEN] = unix.AF_UNSPEC
	msg[unix.NLMSG_HDRLEN+1] = unix.NFNETLINK_V0
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("send IPCTNL_MSG_CT_GET_STATS_CPU: %w", err)
	}
	buf := make([]byte, 16384)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return fmt.Errorf("receive ctnetlink answer: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("parse ctnetlink answer: %w", err)
		}
		if done, err := ctAnswer(msgs, seq); done {
			return err
		}
	}
}

// ctAnswer reads the answers to request seq in msgs: done when the dump
// ended (NLMSG_DONE) or the kernel refused it (NLMSG_ERROR, err its errno).
func ctAnswer(msgs []syscall.NetlinkMessage, seq uint32) (done bool, err error) {
	for _, m := range msgs {
		if m.Header.Seq != seq {
			continue
		}
		switch m.Header.Type {
		case unix.NLMSG_DONE:
			return true, nil
		case unix.NLMSG_ERROR:
			if len(m.Data) < 4 {
				return true, errors.New("IPCTNL_MSG_CT_GET_STATS_CPU: short netlink error message")
			}
			if errno := int32(binary.NativeEndian.Uint32(m.Data[:4])); errno != 0 {
				return true, fmt.Errorf("IPCTNL_MSG_CT_GET_STATS_CPU: %w", syscall.Errno(-errno))
			}
			return true, nil
		}
	}
	return false, nil
}
