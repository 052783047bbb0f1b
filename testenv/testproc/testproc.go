// Package testproc runs the long-lived peers of a test (etcd, the API
// server, kubelet, ...): each started with its output appended to a log
// file, killed if the test binary dies first, and stopped with SIGTERM.
package testproc

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Proc is a started process and the channel closed when it has exited.
type Proc struct {
	// Name names the process in errors; its log is <Name>.log.
	Name string
	// Log is the path of the file its stdout and stderr go to.
	Log string

	cmd    *exec.Cmd
	exited chan struct{}
	err    error // valid once exited is closed
}

// Start starts bin with args, its output appended to dir/<name>.log. The
// process is killed if the test binary dies first (Pdeathsig).
func Start(dir, name, bin string, args ...string) (*Proc, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", logPath, err)
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	done, err := StartHeld(cmd)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &Proc{Name: name, Log: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = <-done
		close(p.exited)
	}()
	return p, nil
}

// StartHeld starts cmd to be killed (Pdeathsig SIGKILL) if the test
// binary dies first, and returns the channel that receives its Wait's
// result: the caller waits there, never on cmd.Wait. Pdeathsig fires when
// the thread that forked the child ends, not the process (golang/go#27505),
// and the Go runtime ends a thread whenever a goroutine locked to it
// returns (nodeshim's private mount namespaces do, criu.privateRun): a
// peer forked from such a thread would be killed mid-test. So cmd is
// started and waited for by a goroutine locked to its thread, which no
// other goroutine can take, until the child has exited.
func StartHeld(cmd *exec.Cmd) (<-chan error, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	started, done := make(chan error, 1), make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		done <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return done, nil
}

// Pid is the process's id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Exited is closed when the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Err is how the process ended, once Exited is closed.
func (p *Proc) Err() error { return p.err }

// Stop sends SIGTERM and waits for the exit, killing after 30 s: a process
// that ignores SIGTERM this long is stuck, and the test must still end.
// A nil or exited Proc is left alone.
func (p *Proc) Stop() {
	if p == nil {
		return
	}
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// Kill kills the process with SIGKILL, as a crash or an OOM kill would,
// and waits for its exit. A nil or exited Proc is left alone.
func (p *Proc) Kill() {
	if p == nil {
		return
	}
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// WaitReady polls ready every 100 ms until it holds, or fails as soon as p
// exits, with the end of its log: a server that crashed on start must not
// leave the test waiting.
func (p *Proc) WaitReady(ready func() bool) error {
	for {
		if ready() {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited before it was ready (%v); log: %s\n%s", p.Name, p.err, p.Log, Tail(p.Log, 30))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Tail returns the last n lines of the file at path, or the error reading
// it.
func Tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
