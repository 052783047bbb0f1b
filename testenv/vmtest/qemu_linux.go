package vmtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// Machine boots one guest and follows its console.
type Machine struct {
	// QEMU is the qemu-system-x86_64 binary.
	QEMU string
	// Kernel is the vmlinuz to boot.
	Kernel string
	// Initrd is the gzip-compressed cpio initramfs.
	Initrd string
	// Label is the kernel label, handed to init as NODESHIM_GUEST.
	Label string
	// MemoryMB is the guest's memory.
	MemoryMB int
	// ArtifactFile receives what the guest writes to its second serial port.
	ArtifactFile string
	// Timeout bounds the whole boot; then QEMU is killed.
	Timeout time.Duration
	// After returns a channel that fires after d; time.After when nil.
	After func(d time.Duration) <-chan time.Time
	// CPUs is the number of virtual CPUs; QEMU's default (one) when 0.
	CPUs int
	// Append is added to the kernel command line, e.g. root=/dev/vda.
	Append string
	// Extra is added to QEMU's arguments, e.g. a -drive.
	Extra []string
	// TCGThread, when set, is TCG's thread mode ("single" or "multi"):
	// QEMU 7.2's multi-threaded TCG, its default with -smp 2, has crashed a
	// 6.12 guest in the kernel's live code patching (int3 in __schedule, a
	// double fault in early boot); "single" runs every vCPU on one thread.
	TCGThread string
}

// Args returns QEMU's command line. TCG only: /dev/kvm hangs on the
// machines nodeshim is tested on, so -enable-kvm is never passed.
func (m *Machine) Args() []string {
	cmdline := "console=ttyS0 quiet panic=-1 psi=1 NODESHIM_GUEST=" + m.Label
	if m.Append != "" {
		cmdline += " " + m.Append
	}
	accel := []string{"-machine", "accel=tcg"}
	if m.TCGThread != "" {
		accel = []string{"-accel", "tcg,thread=" + m.TCGThread}
	}
	args := []string{
		"-nographic", "-no-reboot",
		accel[0], accel[1],
		"-cpu", "max",
		"-m", strconv.Itoa(m.MemoryMB) + "M",
		"-net", "none",
		"-kernel", m.Kernel,
		"-initrd", m.Initrd,
		// panic=-1 reboots at once on a panic and -no-reboot turns that into
		// QEMU exiting; init passes NODESHIM_GUEST on to the tests.
		"-append", cmdline,
		"-serial", "mon:stdio",
		"-serial", "file:" + m.ArtifactFile,
	}
	if m.CPUs > 0 {
		args = append(args, "-smp", strconv.Itoa(m.CPUs))
	}
	return append(args, m.Extra...)
}

// Boot runs the guest to its end, feeding each console line to line. It
// returns hung=true when the timeout killed QEMU, and QEMU's own error.
// An error starting QEMU is returned as startErr.
func (m *Machine) Boot(ctx context.Context, line func(string)) (hung bool, qemuErr error, startErr error) {
	cmd := exec.Command(m.QEMU, m.Args()...)
	// Its own process group, so that killing it leaves nothing behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdin = nil // /dev/null: the console is read-only for the harness
	out, err := cmd.StdoutPipe()
	if err != nil {
		return false, nil, fmt.Errorf("start %s: %w", m.QEMU, err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return false, nil, fmt.Errorf("start %s: %w", m.QEMU, err)
	}
	lines := make(chan struct{})
	go func() {
		defer close(lines)
		scanLines(out, line)
	}()
	after := m.After
	if after == nil {
		after = time.After
	}
	timeout := after(m.Timeout)
	kill := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	select {
	case <-lines:
	case <-timeout:
		hung = true
		kill()
		<-lines
	case <-ctx.Done():
		kill()
		<-lines
		_ = cmd.Wait()
		return false, nil, fmt.Errorf("boot %s: %w", m.Kernel, ctx.Err())
	}
	err = cmd.Wait()
	if hung {
		return true, err, nil
	}
	return false, err, nil
}

// scanLines feeds every line of r to line, also a last one without a newline
// and lines longer than a scanner's buffer (split into pieces).
func scanLines(r io.Reader, line func(string)) {
	br := bufio.NewReaderSize(r, 64*1024)
	for {
		s, err := br.ReadString('\n')
		if s != "" {
			line(s)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				line(fmt.Sprintf("vmtest: reading the console: %v\n", err))
			}
			return
		}
	}
}
