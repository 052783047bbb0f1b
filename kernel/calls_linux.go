package kernel

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// LiveCalls makes the calls of Calls against the running kernel.
type LiveCalls struct{}

// Machine returns utsname.machine from uname(2).
func (LiveCalls) Machine() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}
	return unix.ByteSliceToString(u.Machine[:]), nil
}

// MountSetattr calls mount_setattr(-1, "", AT_EMPTY_PATH|AT_RECURSIVE,
// {attr_set: MOUNT_ATTR_RDONLY}). The flags and attributes are valid, so a
// kernel that has the call (5.12+) gets as far as resolving the file
// descriptor -1 and fails with EBADF; one that lacks it fails with ENOSYS.
// Nothing is ever changed.
func (LiveCalls) MountSetattr() error {
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
	return unix.MountSetattr(-1, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr)
}

// WritePSITrigger writes trigger to the pressure file at path as a PSI
// monitor does (Documentation/accounting/psi.rst: open O_RDWR|O_NONBLOCK,
// write the NUL-terminated trigger) and closes the file, which frees the
// trigger. It refuses files that are not on procfs or cgroup2, so that a
// Host pointed at testdata never writes into it.
func (LiveCalls) WritePSITrigger(path, trigger string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", path, err)
	}
	if st.Type != unix.PROC_SUPER_MAGIC && st.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("%s is not on procfs or cgroup2 (filesystem magic %#x): %w", path, st.Type, errors.ErrUnsupported)
	}
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Write(append([]byte(trigger), 0)); err != nil {
		// The probe words its own evidence; hand back the bare errno.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return pe.Err
		}
		return err
	}
	return nil
}

// TmpfsFlag opens a tmpfs filesystem context with fsopen(2) and sets the
// flag option with fsconfig(2), then closes the context: nothing is mounted.
// An option the kernel does not know fails with EINVAL.
func (LiveCalls) TmpfsFlag(option string) error {
	fd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fsopen tmpfs: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.FsconfigSetFlag(fd, option); err != nil {
		return fmt.Errorf("fsconfig tmpfs %s: %w", option, err)
	}
	return nil
}

// NetfilterGeneration sends NFT_MSG_GETGEN on a NETLINK_NETFILTER socket
// and returns the generation id from the NFT_MSG_NEWGEN answer. A kernel
// without nf_tables answers EOPNOTSUPP; one without nfnetlink refuses the
// socket with EPROTONOSUPPORT.
func (LiveCalls) NetfilterGeneration(ctx context.Context) (uint32, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return 0, fmt.Errorf("socket NETLINK_NETFILTER: %w", err)
	}
	defer unix.Close(fd)
	timeout := time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	if timeout <= 0 {
		return 0, ctx.Err()
	}
	tv := unix.NsecToTimeval(timeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return 0, fmt.Errorf("setsockopt SO_RCVTIMEO: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("bind netlink: %w", err)
	}
	const seq = 1
	msg := make([]byte, unix.NLMSG_HDRLEN+sizeofNfgenmsg)
	binary.NativeEndian.PutUint32(msg[0:4], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:6], unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETGEN)
	binary.NativeEndian.PutUint16(msg[6:8], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	binary.NativeEndian.PutUint32(msg[8:12], seq)
	msg[unix.NLMSG_HDRLEN] = unix.AF_UNSPEC
	msg[unix.NLMSG_HDRLEN+1] = unix.NFNETLINK_V0
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("send NFT_MSG_GETGEN: %w", err)
	}
	return readGeneration(fd, seq)
}

// readGeneration reads netlink answers to request seq until the ack.
func readGeneration(fd int, seq uint32) (uint32, error) {
	buf := make([]byte, 8192)
	var gen uint32
	found := false
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return 0, fmt.Errorf("receive nf_tables answer: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return 0, fmt.Errorf("parse nf_tables answer: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return 0, errors.New("short netlink error message")
				}
				if errno := int32(binary.NativeEndian.Uint32(m.Data[:4])); errno != 0 {
					return 0, fmt.Errorf("NFT_MSG_GETGEN: %w", syscall.Errno(-errno))
				}
				if !found {
					return 0, errors.New("NFT_MSG_GETGEN acknowledged without a generation")
				}
				return gen, nil
			case unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWGEN:
				g, ok := parseGenID(m.Data)
				if !ok {
					return 0, errors.New("NFT_MSG_NEWGEN without NFTA_GEN_ID")
				}
				gen, found = g, true
			}
		}
	}
}

// parseGenID finds the big-endian NFTA_GEN_ID attribute after the nfgenmsg
// header.
func parseGenID(b []byte) (uint32, bool) {
	if len(b) < sizeofNfgenmsg {
		return 0, false
	}
	b = b[sizeofNfgenmsg:]
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b[0:2]))
		typ := binary.NativeEndian.Uint16(b[2:4]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
		if l < 4 || l > len(b) {
			return 0, false
		}
		if typ == unix.NFTA_GEN_ID && l >= 8 {
			return binary.BigEndian.Uint32(b[4:8]), true
		}
		b = b[min((l+3)&^3, len(b)):]
	}
	return 0, false
}

// NewUserNamespace starts a child in a new user namespace (clone with
// CLONE_NEWUSER) that execs a path that does not exist. If the clone is
// refused the error is the kernel's (EPERM, ENOSPC when max_user_namespaces
// is reached, EINVAL without CONFIG_USER_NS); if it succeeds the child's
// exec fails with ENOENT, which proves the namespace was created. The
// child is reaped by ForkExec.
func (LiveCalls) NewUserNamespace() error {
	_, err := syscall.ForkExec("/nonexistent/nodeshim-userns-probe", nil, &syscall.ProcAttr{
		Sys: &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER},
	})
	if errors.Is(err, syscall.ENOENT) {
		return nil
	}
	if err == nil {
		return errors.New("clone CLONE_NEWUSER: exec of a missing path succeeded")
	}
	return fmt.Errorf("clone CLONE_NEWUSER: %w", err)
}

// Run runs name with args and returns its combined output.
func (LiveCalls) Run(ctx context.Context, name string, args ...string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, path, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w", path, err)
	}
	return string(out), nil
}

// sizeofNfgenmsg is the size of struct nfgenmsg (family, version, res_id).
const sizeofNfgenmsg = 4
