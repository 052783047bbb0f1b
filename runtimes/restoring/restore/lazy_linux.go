package restore

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/archive"
	"github.com/nodeshim/nodeshim/internal/mountinfo"
	"github.com/nodeshim/nodeshim/runtimes/restoring"
)

// LazyFetchTimeout bounds a lazy restore's fetch of the memory after the
// container runs: a daemon that has not fetched all of it by then is
// killed, and the restored process with it.
const LazyFetchTimeout = 10 * time.Minute

// lazyStartTimeout bounds the start of the lazy-pages daemon, and
// abortTimeout the supervisor's cleanup when the restore fails.
const (
	lazyStartTimeout = time.Minute
	abortTimeout     = 30 * time.Second
)

// superviseArg is the hidden first argument with which the restoring
// binary runs as the supervisor of a lazy restore's `criu lazy-pages`
// (superviseLazyPages); runc's command lines never start with it.
const superviseArg = "--nodeshim-supervise-lazy-pages"

// The supervisor's inherited descriptors (exec.Cmd.ExtraFiles from 3).
const (
	superviseLockFd  = 3 // the work directory's flock
	superviseReadyFd = 4 // written: "ok", or why the daemon did not start
	superviseGoFd    = 5 // read: "go <pid>", or EOF to stop
)

// superviseParams are what the supervisor is told, as JSON in its
// second argument.
type superviseParams struct {
	// Criu is the CRIU binary's path.
	Criu string `json:"criu"`
	// From is the page server, TLS the files the daemon fetches with.
	From criu.PageServer `json:"from"`
	TLS  criu.TLS        `json:"tls"`
	// Images holds the CRIU images, WorkDir is runc's --work-path, where
	// the daemon listens; Top is the restore's work directory, removed
	// at the end (its tmpfs unmounted first, if one is mounted on it).
	Images  string `json:"images"`
	WorkDir string `json:"workDir"`
	Top     string `json:"top"`
	// Timeout bounds the fetch (LazyFetchTimeout).
	Timeout time.Duration `json:"timeout"`
	// ID, Log and LogFormat are the container's id and the runtime's
	// log, where the supervisor reports how the fetch ended.
	ID        string `json:"id"`
	Log       string `json:"log"`
	LogFormat string `json:"logFormat"`
}

// lazySource checks that this node may restore a container whose memory
// the page server ps serves: only over mutual TLS, with the node's
// Config.LazyTLS.
func (r *Restore) lazySource(ps string) (*criu.PageServer, error) {
	if r.Config.LazyTLS == nil {
		return nil, fmt.Errorf("%w: a lazy checkpoint, whose memory the page server %s serves: this node has no lazyTLS in its nodeshim-runc config to fetch it over mutual TLS", ErrUnsupported, ps)
	}
	s, err := criu.ParsePageServer(ps)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	return &s, nil
}

// lazySupervisor is the parent's handle on a started supervisor.
type lazySupervisor struct {
	cmd    *exec.Cmd
	goPipe *os.File
	exited chan struct{}
	handed bool
	// reason is what the supervisor wrote after "ok": why its daemon
	// ended before the restore was handed over; read once exited.
	reason chan string
}

// startLazyPages starts the supervisor of a lazy restore of images in
// work: a copy of this binary in a session of its own, which outlives
// this process (the shim's create returns while the memory is still on
// its way), holds the work directory's lock (so SweepWorkDir leaves it
// alone), starts `criu lazy-pages` from the page server from with
// Config.LazyTLS listening in runc's work directory, and returns once the
// daemon is ready. Until handOver, the supervisor stops the daemon and
// removes work as soon as this process lets go of it.
func (r *Restore) startLazyPages(from criu.PageServer, images, work string, lock *os.File) (*lazySupervisor, error) {
	if raised, err := criu.PrepareLazyPages(""); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
	} else if raised {
		restoring.Log(r.Call, "info", fmt.Sprintf("nodeshim-runc: %s: raised fs.pipe-max-size to %d for CRIU's page transfer", r.Call.ID, criu.LazyPipeBytes))
	}
	bin := r.Config.Criu
	if bin == "" {
		p, err := exec.LookPath("criu")
		if err != nil {
			return nil, fmt.Errorf("%w: a lazy restore needs criu: %w", ErrUnsupported, err)
		}
		bin = p
	}
	runcWork := filepath.Join(work, "work")
	if err := os.Mkdir(runcWork, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", runcWork, err)
	}
	t := r.Config.LazyTLS
	b, err := json.Marshal(superviseParams{
		Criu: bin, From: from, TLS: criu.TLS{CACert: t.CACert, Cert: t.Cert, Key: t.Key},
		Images: filepath.Join(images, archive.ImagesDir), WorkDir: runcWork, Top: work, Timeout: LazyFetchTimeout,
		ID: r.Call.ID, Log: r.Call.Log, LogFormat: r.Call.LogFormat,
	})
	if err != nil {
		return nil, err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	goR, goW, err := os.Pipe()
	if err != nil {
		readyR.Close()
		readyW.Close()
		return nil, fmt.Errorf("pipe: %w", err)
	}
	// Descriptors the shim gave this process without close-on-exec (its
	// pipes, say) must not stay open for as long as the supervisor runs.
	_ = unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	cmd := exec.Command("/proc/self/exe", superviseArg, string(b))
	cmd.ExtraFiles = []*os.File{lock, readyW, goR}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	readyW.Close()
	goR.Close()
	if err != nil {
		readyR.Close()
		goW.Close()
		return nil, fmt.Errorf("start the lazy-pages supervisor: %w", err)
	}
	s := &lazySupervisor{cmd: cmd, goPipe: goW, exited: make(chan struct{}), reason: make(chan string, 1)}
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	msg := make(chan string, 1)
	go func() {
		defer readyR.Close()
		br := bufio.NewReader(io.LimitReader(readyR, 64<<10))
		line, _ := br.ReadString('\n')
		msg <- line
		rest, _ := io.ReadAll(br)
		s.reason <- strings.TrimSpace(string(rest))
	}()
	select {
	case m := <-msg:
		if m == "ok\n" {
			return s, nil
		}
		s.abort()
		if m == "" {
			m = "the supervisor ended before its daemon was ready"
		}
		return nil, fmt.Errorf("fetch the memory from %s: %s", from, m)
	case <-time.After(lazyStartTimeout):
		s.abort()
		return nil, fmt.Errorf("fetch the memory from %s: criu lazy-pages not ready after %s", from, lazyStartTimeout)
	}
}

// failed returns a channel closed when the supervisor has ended before
// the hand-over (its daemon failed: the restore cannot get the memory),
// and why.
func (s *lazySupervisor) failed() (<-chan struct{}, func() string) {
	return s.exited, func() string {
		select {
		case r := <-s.reason:
			if r == "" {
				r = "the lazy-pages supervisor ended"
			}
			return r
		case <-time.After(time.Second):
			return "the lazy-pages supervisor ended"
		}
	}
}

// handOver tells the supervisor that the container runs as pid: it now
// owns the work directory and removes it once the memory is fetched.
func (s *lazySupervisor) handOver(pid int) error {
	_, err := fmt.Fprintf(s.goPipe, "go %d\n", pid)
	if cerr := s.goPipe.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("hand the restore over to the lazy-pages supervisor (pid %d): %w", s.cmd.Process.Pid, err)
	}
	s.handed = true
	return nil
}

// abort stops the supervisor unless it was handed the restore: it stops
// the daemon and removes the work directory, and is waited for (killed
// after abortTimeout), so that nothing is left when the restore fails.
func (s *lazySupervisor) abort() {
	if s.handed {
		return
	}
	s.handed = true
	s.goPipe.Close()
	select {
	case <-s.exited:
	case <-time.After(abortTimeout):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// superviseLazyPages is the supervisor (see startLazyPages); its exit
// code is 0 when the memory was fetched.
func superviseLazyPages(arg string) int {
	lock := os.NewFile(superviseLockFd, "lock")
	ready := os.NewFile(superviseReadyFd, "ready")
	goPipe := os.NewFile(superviseGoFd, "go")
	for _, fd := range []int{superviseLockFd, superviseReadyFd, superviseGoFd} {
		syscall.CloseOnExec(fd)
	}
	var p superviseParams
	if err := json.Unmarshal([]byte(arg), &p); err != nil || p.Top == "" {
		fmt.Fprintf(ready, "lazy-pages supervisor: bad parameters: %v", err)
		return 1
	}
	call := restoring.Call{ID: p.ID, Log: p.Log, LogFormat: p.LogFormat}
	ctx, cancel := context.WithTimeout(context.Background(), lazyStartTimeout)
	d, err := criu.StartLazyPages(ctx, criu.LazyPagesOptions{
		Binary: criu.Binary{Path: p.Criu}, From: p.From, TLS: &p.TLS,
		ImagesDir: p.Images, WorkDir: p.WorkDir, ExtraFiles: []*os.File{lock},
	})
	cancel()
	if err != nil {
		// The parent removes the work directory.
		fmt.Fprint(ready, err.Error())
		return 1
	}
	fmt.Fprint(ready, "ok\n")

	fctx, fcancel := context.WithTimeout(context.Background(), p.Timeout)
	defer fcancel()
	waited := make(chan error, 1)
	go func() { waited <- d.Wait(fctx) }()
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(io.LimitReader(goPipe, 64)).ReadString('\n')
		lines <- line
	}()
	var line string
	var derr error
	daemonDone := false
	select {
	case line = <-lines:
	case derr = <-waited:
		daemonDone = true
		if derr != nil {
			// CRIU's restore waits for a daemon that is gone: the
			// parent stops it and removes the work directory.
			fmt.Fprint(ready, derr.Error())
			ready.Close()
			return 1
		}
		line = <-lines
	}
	ready.Close()
	goPipe.Close()
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), "go ")
	pid, perr := strconv.Atoi(rest)
	if !ok || perr != nil {
		// The restore failed, or the parent died before it ended.
		d.Kill()
		if err := removeWork(p.Top); err != nil {
			restoring.Log(call, "error", fmt.Sprintf("nodeshim-runc: %s: %v", p.ID, err))
		}
		return 1
	}
	// A pidfd, so that a kill after a failed fetch never reaches a
	// process that reused the pid.
	pidfd := -1
	if pid > 0 {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			pidfd = fd
			defer unix.Close(fd)
		}
	}
	start := time.Now()
	err = derr
	if !daemonDone {
		err = <-waited
	}
	code := 0
	if err != nil {
		code = 1
		// The restored process would fault on pages nobody serves.
		killed := "not killed: no pidfd"
		if pidfd >= 0 {
			killed = "killed"
			if kerr := unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0); kerr != nil {
				killed = fmt.Sprintf("not killed: %v", kerr)
			}
		}
		restoring.Log(call, "error", fmt.Sprintf("nodeshim-runc: %s: fetching its memory from %s failed after %s; restored pid %d %s: %v",
			p.ID, p.From, time.Since(start).Round(time.Millisecond), pid, killed, err))
	} else {
		restoring.Log(call, "info", fmt.Sprintf("nodeshim-runc: %s: memory fetched from %s in %s", p.ID, p.From, time.Since(start).Round(time.Millisecond)))
	}
	if err := removeWork(p.Top); err != nil {
		code = 1
		restoring.Log(call, "error", fmt.Sprintf("nodeshim-runc: %s: %v", p.ID, err))
	}
	lock.Close()
	return code
}

// removeWork removes a restore's work directory, unmounting first the
// tmpfs an encrypted archive's restore mounted on it (seal.EnsureInMemory):
// a mount point is on another device than its parent.
func removeWork(dir string) error {
	var st, parent unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("stat %s: %w", dir, err)
	}
	if err := unix.Lstat(filepath.Dir(dir), &parent); err != nil {
		return fmt.Errorf("stat %s: %w", filepath.Dir(dir), err)
	}
	// CRIU's restore mounts its cgroup yard in its work directory; one
	// killed mid-restore leaves it mounted.
	if err := unmountBelow(dir); err != nil {
		return err
	}
	if st.Dev != parent.Dev {
		if err := unix.Unmount(dir, 0); err != nil {
			if errors.Is(err, unix.EBUSY) {
				err = unix.Unmount(dir, unix.MNT_DETACH)
			}
			if err != nil {
				return fmt.Errorf("unmount the tmpfs on %s: %w", dir, err)
			}
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// unmountBelow detaches every mount below dir, the deepest first, so
// that removing dir never reaches into another filesystem.
func unmountBelow(dir string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("read mountinfo: %w", err)
	}
	ents, err := mountinfo.Parse(b)
	if err != nil {
		return fmt.Errorf("parse mountinfo: %w", err)
	}
	var points []string
	for _, e := range ents {
		if strings.HasPrefix(e.Point, dir+"/") {
			points = append(points, e.Point)
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, mp := range points {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount %s: %w", mp, err)
		}
	}
	return nil
}

// runLazy runs the runtime's lazy restore cmd in a process group of its
// own: CRIU's restore waits for the lazy-pages daemon, so when the daemon
// ends first (its fetch refused: another CA, the page server gone) the
// runtime and its CRIU are killed, then the tasks CRIU had half restored
// in the container's cgroups (containerCgroups.kill), and the half-made
// container deleted.
func (r *Restore) runLazy(cmd *exec.Cmd, sup *lazySupervisor) error {
	cg := r.snapshotCgroups()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	failed, reason := sup.failed()
	select {
	case err := <-done:
		return err
	case <-failed:
		_ = unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
		<-done
		// The restored tasks are in a session of their own, which the
		// process group's kill does not reach.
		if err := cg.kill(cgroupKillTimeout); err != nil {
			restoring.Log(r.Call, "error", fmt.Sprintf("nodeshim-runc: %s: %v", r.Call.ID, err))
		}
		_ = exec.Command(r.Runtime, append(r.globalArgs(), "delete", "--force", r.Call.ID)...).Run()
		// runc mounts the rootfs at criu-root in the container's state
		// directory for CRIU; a restore killed midway leaves it, and
		// the directory, which delete does not know yet.
		state := filepath.Dir(restoring.MarkerPath(r.Call.Root, r.Runtime, r.Call.ID))
		if err := unmountBelow(state); err == nil {
			_ = os.RemoveAll(state)
		}
		return fmt.Errorf("%w: fetching the memory failed: %s", ErrRefused, reason())
	}
}
