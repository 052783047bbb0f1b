package criu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/kernel/capability"
)

// ErrLazyPagesUnsupported is returned, wrapped with the missing feature,
// when a lazy checkpoint or restore is asked for on a host that cannot do
// one. The plain checkpoint and restore still work there.
var ErrLazyPagesUnsupported = errors.New("lazy pages (post-copy migration) not supported here")

// LazyPagesLog is the log of the restoring side's `criu lazy-pages`, in
// the restore's work directory.
const LazyPagesLog = "lazy-pages.log"

// PageServer is the TCP address of a lazy checkpoint's page server: where
// the checkpointing CRIU serves the tree's memory and where the restoring
// side fetches it from.
type PageServer struct {
	Address string
	Port    int
}

// ParsePageServer parses HOST:PORT.
func ParsePageServer(s string) (PageServer, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return PageServer{}, fmt.Errorf("page server %q: %w", s, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p > 65535 {
		return PageServer{}, fmt.Errorf("page server %q: port %q is not a TCP port", s, port)
	}
	if host == "" {
		return PageServer{}, fmt.Errorf("page server %q: no host", s)
	}
	return PageServer{Address: host, Port: p}, nil
}

func (p PageServer) String() string { return net.JoinHostPort(p.Address, strconv.Itoa(p.Port)) }

// TLS are the PEM files of a page server connection's mutual TLS (CRIU's
// --tls, --tls-cacert, --tls-cert and --tls-key): each side presents Cert
// and Key and accepts only a peer whose certificate CACert signed; the
// restoring side also checks that the page server's certificate names
// the address it connects to. With TLS a lazy migration's memory never
// crosses the network in the clear.
type TLS struct {
	CACert, Cert, Key string
}

// validate checks that every file is named and readable.
func (t *TLS) validate() error {
	for _, f := range []struct{ what, path string }{{"CA certificate", t.CACert}, {"certificate", t.Cert}, {"key", t.Key}} {
		if f.path == "" {
			return fmt.Errorf("page server TLS: no %s file", f.what)
		}
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("page server TLS %s: %w", f.what, err)
		}
	}
	return nil
}

// args are CRIU's command-line options for t; none for nil.
func (t *TLS) args() []string {
	if t == nil {
		return nil
	}
	return []string{"--tls", "--tls-cacert", t.CACert, "--tls-cert", t.Cert, "--tls-key", t.Key}
}

// LazyPipeBytes is the pipe size CRIU 4.1's page server asks for
// (page-pipe.c: F_SETPIPE_SZ of PIPE_MAX_SIZE, 1024 pages) when it serves
// pages to a lazy restore. Above fs.pipe-max-size that needs
// CAP_SYS_RESOURCE; without it the call fails, CRIU ignores the failure
// and the first page request fails with "splice: Bad file descriptor".
const LazyPipeBytes = 4 << 20

// CheckLazyPages says whether this host can take part in a lazy migration:
// the kernel must have userfaultfd(2) (CONFIG_USERFAULTFD, Linux 4.3; the
// restoring side registers the restored memory with it), and CRIU's page
// pipes must be allowed LazyPipeBytes (fs.pipe-max-size, or
// CAP_SYS_RESOURCE). It returns nil or an error wrapping
// ErrLazyPagesUnsupported that names what is missing.
func CheckLazyPages(procRoot string) error {
	if procRoot == "" {
		procRoot = "/proc"
	}
	fd, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, uintptr(unix.O_CLOEXEC|unix.O_NONBLOCK), 0, 0)
	if errno != 0 {
		return fmt.Errorf("%w: userfaultfd(2): %w (CONFIG_USERFAULTFD)", ErrLazyPagesUnsupported, errno)
	}
	unix.Close(int(fd))
	if hasCapSysResource() {
		return nil
	}
	n, err := pipeMaxSize(procRoot)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrLazyPagesUnsupported, err)
	}
	if n < LazyPipeBytes {
		return fmt.Errorf("%w: fs.pipe-max-size is %d, CRIU's page server needs %d without CAP_SYS_RESOURCE", ErrLazyPagesUnsupported, n, LazyPipeBytes)
	}
	return nil
}

// PrepareLazyPages raises fs.pipe-max-size to LazyPipeBytes when it is
// lower and this process lacks CAP_SYS_RESOURCE (never lowers it), then
// checks the host with CheckLazyPages. It reports whether it changed the
// sysctl.
func PrepareLazyPages(procRoot string) (raised bool, err error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	if !hasCapSysResource() {
		if n, err := pipeMaxSize(procRoot); err == nil && n < LazyPipeBytes {
			p := filepath.Join(procRoot, "sys/fs/pipe-max-size")
			if err := os.WriteFile(p, []byte(strconv.Itoa(LazyPipeBytes)), 0); err != nil {
				return false, fmt.Errorf("%w: raise %s from %d to %d: %w", ErrLazyPagesUnsupported, p, n, LazyPipeBytes, err)
			}
			raised = true
		}
	}
	return raised, CheckLazyPages(procRoot)
}

func pipeMaxSize(procRoot string) (int, error) {
	p := filepath.Join(procRoot, "sys/fs/pipe-max-size")
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", p, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", p, err)
	}
	return n, nil
}

// hasCapSysResource reports whether this process may size pipes beyond
// fs.pipe-max-size (CRIU, its child, inherits the capability).
func hasCapSysResource() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[unix.CAP_SYS_RESOURCE/32].Effective&(1<<(unix.CAP_SYS_RESOURCE%32)) != 0
}

// statusPipe is the pipe CRIU writes a byte to (--status-fd) when its page
// server or lazy-pages daemon is ready.
type statusPipe struct{ r, w *os.File }

func newStatusPipe() (*statusPipe, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("status pipe for criu: %w", err)
	}
	return &statusPipe{r: r, w: w}, nil
}

// wait blocks until CRIU signals readiness, or done is closed (CRIU
// ended first), or ctx ends.
func (s *statusPipe) wait(ctx context.Context, done <-chan struct{}) error {
	got := make(chan error, 1)
	go func() {
		var b [1]byte
		_, err := s.r.Read(b[:])
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			return fmt.Errorf("criu closed its status pipe before it was ready: %w", err)
		}
		return nil
	case <-done:
		return errors.New("criu ended before it was ready")
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *statusPipe) close() {
	s.r.Close()
	s.w.Close()
}

// LazyPages is a running `criu lazy-pages`: it fetches a lazily restored
// tree's memory from the page server, on the tree's page faults first and
// the rest in the background, and exits when it has all of it.
type LazyPages struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  string
}

// LazyPagesOptions say where a `criu lazy-pages` daemon fetches from and
// where the restore it serves finds it.
type LazyPagesOptions struct {
	Binary Binary
	// From is the page server; TLS, when set, secures the connection.
	From PageServer
	TLS  *TLS
	// ImagesDir holds the lazy checkpoint's images; WorkDir is the
	// restore's work directory, where the daemon listens on
	// lazy-pages.socket and writes LazyPagesLog.
	ImagesDir, WorkDir string
	// HardwareBreakpoints: see Options.HardwareBreakpoints.
	HardwareBreakpoints bool
	// ExtraFiles are passed to the daemon after its status pipe (fd 4
	// on): a lock the daemon must hold for as long as it runs, say.
	ExtraFiles []*os.File
}

// StartLazyPages starts the daemon of o and waits until it listens in
// o.WorkDir, where the restore finds it. It runs in its own process
// group.
func StartLazyPages(ctx context.Context, o LazyPagesOptions) (*LazyPages, error) {
	if o.TLS != nil {
		if err := o.TLS.validate(); err != nil {
			return nil, err
		}
	}
	st, err := newStatusPipe()
	if err != nil {
		return nil, err
	}
	defer st.close()
	d := &LazyPages{done: make(chan struct{}), log: filepath.Join(o.WorkDir, LazyPagesLog)}
	args := []string{"lazy-pages", "--page-server",
		"--address", o.From.Address, "--port", strconv.Itoa(o.From.Port),
		"--images-dir", o.ImagesDir, "--work-dir", o.WorkDir,
		"--log-file", LazyPagesLog, "-v4", "--status-fd", "3"}
	d.cmd = exec.Command(o.Binary.Path, append(args, o.TLS.args()...)...)
	d.cmd.ExtraFiles = append([]*os.File{st.w}, o.ExtraFiles...)
	if !o.HardwareBreakpoints {
		d.cmd.Env = append(os.Environ(), noBreakpointsEnv)
	}
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s lazy-pages: %w", o.Binary.Path, err)
	}
	go func() {
		d.err = d.cmd.Wait()
		close(d.done)
	}()
	st.w.Close()
	if err := st.wait(ctx, d.done); err != nil {
		d.Kill()
		return nil, fmt.Errorf("criu lazy-pages from %s: %w; %s: %s", o.From, err, LazyPagesLog, logErrors(d.log))
	}
	return d, nil
}

// Wait waits until the daemon has fetched all the memory and exited; an
// ended ctx kills it.
func (d *LazyPages) Wait(ctx context.Context) error {
	select {
	case <-d.done:
	case <-ctx.Done():
		d.Kill()
		return fmt.Errorf("criu lazy-pages: %w", ctx.Err())
	}
	if d.err != nil {
		return fmt.Errorf("criu lazy-pages: %w; %s: %s", d.err, LazyPagesLog, logErrors(d.log))
	}
	return nil
}

// Kill kills the daemon's process group and waits a little for it.
func (d *LazyPages) Kill() {
	_ = unix.Kill(-d.cmd.Process.Pid, unix.SIGKILL)
	select {
	case <-d.done:
	case <-time.After(DefaultKillGrace):
	}
}

// dumpLazy runs a lazy dump of t: it waits for CRIU's page server to be
// ready, then calls archive (the images but the memory are written by
// then), then waits until the restore has fetched the memory and CRIU has
// killed the tree. If archive fails, CRIU is stopped and the tree left
// running.
func dumpLazy(ctx context.Context, t Target, o Options, work, images string, archive func() error, res *Result) error {
	st, err := newStatusPipe()
	if err != nil {
		return err
	}
	defer st.close()
	start := time.Now()
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	var derr error
	go func() {
		defer close(done)
		// CRIU opens the write end as /proc/<our pid>/fd/<fd>.
		derr = dump(dctx, t, o, work, images, int(st.w.Fd()), nil, dumpRound{})
	}()
	if err := st.wait(ctx, done); err != nil {
		cancel()
		<-done
		return errors.Join(derr, fmt.Errorf("checkpoint pid %d: page server on %s: %w", t.Pid, o.Lazy, err))
	}
	ready := time.Now()
	// CRIU's frozen_time of a lazy dump spans the whole transfer, which
	// the tree spends running on the restoring side; what it is frozen
	// for before it can run there is up to here.
	res.Frozen = ready.Sub(start)
	o.Logger.Info("page server ready; writing the archive", "pid", t.Pid, "address", o.Lazy.String())
	if err := archive(); err != nil {
		cancel()
		<-done
		return err
	}
	<-done
	res.Serve = time.Since(ready)
	return derr
}

// lazyPagesFinding is the report's criu.lazy_pages: what CheckLazyPages
// checks, with a pipe-max-size below LazyPipeBytes only Degraded, since
// nodeshim raises it when a lazy migration is asked for.
func lazyPagesFinding(procRoot string) capability.Finding {
	fd, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, uintptr(unix.O_CLOEXEC|unix.O_NONBLOCK), 0, 0)
	if errno != 0 {
		return capability.Findingf(capability.Unsupported, "userfaultfd(2): %v (CONFIG_USERFAULTFD); checkpoint and restore work without --lazy", errno)
	}
	unix.Close(int(fd))
	if hasCapSysResource() {
		return capability.Findingf(capability.Supported, "userfaultfd(2) works; CAP_SYS_RESOURCE sizes CRIU's page pipes")
	}
	n, err := pipeMaxSize(procRoot)
	if err != nil {
		return capability.Findingf(capability.Unknown, "userfaultfd(2) works; %v", err)
	}
	if n < LazyPipeBytes {
		return capability.Findingf(capability.Degraded, "userfaultfd(2) works; fs.pipe-max-size %d < %d that CRIU's page server needs without CAP_SYS_RESOURCE: nodeshim raises it on checkpoint --lazy / restore --lazy-from", n, LazyPipeBytes)
	}
	return capability.Findingf(capability.Supported, "userfaultfd(2) works; fs.pipe-max-size %d >= %d", n, LazyPipeBytes)
}
