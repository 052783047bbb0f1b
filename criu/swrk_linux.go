package criu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"github.com/nodeshim/nodeshim/internal/syncbuf"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// ErrCriu is returned, wrapped, when CRIU itself reports a failure.
var ErrCriu = errors.New("criu failed")

// noBreakpointsEnv makes CRIU stop tasks at the end of its parasite code
// with PTRACE_SYSCALL instead of a hardware breakpoint (CRIU's fault
// injection FI_NO_BREAKPOINTS, 130, the mode CRIU's own test suite runs
// in). On machines whose hardware breakpoints do not fire, such as this
// project's KVM guests with kernel 6.18, the breakpoint path hangs CRIU in
// wait4 with every thread of a multi-threaded target but one left in
// ptrace stop: the dump of a Go program never ends and the target stays
// frozen. The PTRACE_SYSCALL path costs a few extra stops per thread.
const noBreakpointsEnv = "CRIU_FAULT=130"

// swrk is one `criu swrk` child and its RPC socket.
//
// go-criu's Criu type runs the same protocol but hides the child and the
// socket, so a request cannot be cancelled through it. nodeshim uses
// go-criu's message types and owns the child: on cancellation it shuts the
// socket down, which makes CRIU abort at its next notification and cure
// the tasks it seized; only if CRIU does not exit within a grace period is
// it killed.
type swrk struct {
	cmd *exec.Cmd
	// mu orders the cancellation's shutdown(2) of sk before its close.
	mu     sync.Mutex
	closed bool
	sk     *os.File
	stderr syncbuf.Buffer // the child's output, read by error paths
	done   chan struct{}
	err    error
}

func startSwrk(bin Binary, breakpoints bool) (*swrk, error) {
	return startSwrkWith(bin, breakpoints, nil)
}

// startSwrkWith is startSwrk with the child started through start.
func startSwrkWith(bin Binary, breakpoints bool, start starter) (*swrk, error) {
	if start == nil {
		start = (*exec.Cmd).Start
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair for criu swrk: %w", err)
	}
	cln := os.NewFile(uintptr(fds[0]), "criu-rpc")
	srv := os.NewFile(uintptr(fds[1]), "criu-rpc-peer")
	defer srv.Close()
	s := &swrk{sk: cln, done: make(chan struct{})}
	// The peer end becomes fd 3 in the child.
	s.cmd = exec.Command(bin.Path, "swrk", "3")
	s.cmd.ExtraFiles = []*os.File{srv}
	if !breakpoints {
		s.cmd.Env = append(os.Environ(), noBreakpointsEnv)
	}
	s.cmd.Stdout = &s.stderr
	s.cmd.Stderr = &s.stderr
	// Its own process group: a ^C on the terminal reaches nodeshim, which
	// aborts the dump cleanly, and not CRIU in the middle of it.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := start(s.cmd); err != nil {
		cln.Close()
		return nil, fmt.Errorf("start %s swrk: %w", bin.Path, err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	return s, nil
}

// call sends req and answers CRIU's notifications with notify until the
// final response. When ctx ends, the socket is shut down so that CRIU
// aborts; call then returns ctx's error.
func (s *swrk) call(ctx context.Context, req *rpc.CriuReq, notify func(n *rpc.CriuNotify) error) (*rpc.CriuResp, error) {
	stop := context.AfterFunc(ctx, s.shutdown)
	defer stop()
	want := req.GetType()
	buf := make([]byte, 64<<10)
	for {
		b, err := proto.Marshal(req)
		if err != nil {
			return nil, fmt.Errorf("encode criu request: %w", err)
		}
		if _, err := s.sk.Write(b); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("send criu request: %w", err)
		}
		n, err := s.sk.Read(buf)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil || n == 0 {
			return nil, fmt.Errorf("read criu response: %w (criu: %s)", errOrEOF(err), s.output())
		}
		resp := &rpc.CriuResp{}
		if err := proto.Unmarshal(buf[:n], resp); err != nil {
			return nil, fmt.Errorf("decode criu response: %w", err)
		}
		if !resp.GetSuccess() {
			msg := strings.TrimSpace(resp.GetCrErrmsg())
			if msg == "" || isRlimitNoise(msg) {
				return resp, fmt.Errorf("%w: %s request", ErrCriu, want)
			}
			return resp, fmt.Errorf("%w: %s request: %s", ErrCriu, want, msg)
		}
		if resp.GetType() != rpc.CriuReqType_NOTIFY {
			if resp.GetType() != want {
				return resp, fmt.Errorf("criu answered %s to a %s request", resp.GetType(), want)
			}
			return resp, nil
		}
		if notify != nil {
			if err := notify(resp.GetNotify()); err != nil {
				// A failed notification makes CRIU abort the request and
				// cure the tasks it seized.
				_ = s.reply(false)
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, err
			}
		}
		req = &rpc.CriuReq{Type: rpc.CriuReqType_NOTIFY.Enum(), NotifySuccess: proto.Bool(true)}
	}
}

// shutdown unblocks a pending read; CRIU's next send or receive fails and
// it aborts the request, unfreezing what it froze.
func (s *swrk) shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if rc, err := s.sk.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_RDWR) })
	}
}

// reply answers a notification without waiting for the next message.
func (s *swrk) reply(ok bool) error {
	b, err := proto.Marshal(&rpc.CriuReq{Type: rpc.CriuReqType_NOTIFY.Enum(), NotifySuccess: proto.Bool(ok)})
	if err != nil {
		return err
	}
	_, err = s.sk.Write(b)
	return err
}

func errOrEOF(err error) error {
	if err == nil {
		return errors.New("connection closed")
	}
	return err
}

// output is what the child wrote to stdout and stderr, for error messages.
func (s *swrk) output() string {
	select {
	case <-s.done:
	case <-time.After(100 * time.Millisecond):
	}
	out := strings.TrimSpace(s.stderr.String())
	if out == "" {
		return "no output"
	}
	return truncate(out, 500)
}

// close closes the socket and waits for CRIU to exit; after grace it kills
// CRIU's process group. It reports whether CRIU had to be killed.
func (s *swrk) close(grace time.Duration) (killed bool) {
	s.mu.Lock()
	s.closed = true
	_ = s.sk.Close()
	s.mu.Unlock()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-s.done:
		return false
	case <-t.C:
	}
	_ = unix.Kill(-s.cmd.Process.Pid, unix.SIGKILL)
	<-s.done
	return true
}
