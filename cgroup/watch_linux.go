package cgroup

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNoTrigger is the fallback reason for a pressure file outside cgroup2
// and procfs, which cannot take a trigger.
var ErrNoTrigger = errors.New("not a kernel pressure file")

// WatchOptions tunes a Watcher.
type WatchOptions struct {
	// PollInterval is the fallback's read interval; zero means
	// DefaultPollInterval.
	PollInterval time.Duration
	// ForcePoll skips the trigger and polls, so both modes can be compared
	// on a kernel that accepts triggers.
	ForcePoll bool
	// WidenWindow, when the kernel refuses the trigger with EINVAL, arms
	// it again with the same stall in a window rounded up to a multiple of
	// 2 s, which Linux 6.5 and later accept from a process without
	// CAP_SYS_RESOURCE, instead of polling. Such triggers are checked only
	// on the kernel's 2 s averaging tick, so the first event can take 2 s
	// or more (measured: 2.04 s from the start of thrashing, against
	// 0.2 s polled); what it saves is the polling's wake-ups.
	WidenWindow bool
}

// Watcher watches one pressure file (a cgroup's memory.pressure, or
// /proc/pressure/memory) for a Trigger.
type Watcher struct {
	path     string
	trig     Trigger
	armed    Trigger
	interval time.Duration
	mode     WatchMode
	reason   error
	fd       int
}

// NewWatcher arms trig on the pressure file at path. When the kernel refuses
// the trigger (EINVAL on kernels booted without trigger support or with
// psi=1 over CONFIG_PSI_DEFAULT_DISABLED as seen on 6.18 here, EBUSY, EPERM,
// EACCES, EOPNOTSUPP when cgroup.pressure is 0), the Watcher falls back to
// polling the file's total; Mode and FallbackReason say which mode is active
// and why. A file that cannot be opened at all is an error.
func NewWatcher(path string, trig Trigger, opts WatchOptions) (*Watcher, error) {
	w := &Watcher{path: path, trig: trig, interval: opts.PollInterval, fd: -1}
	if w.interval <= 0 {
		w.interval = DefaultPollInterval
	}
	if opts.ForcePoll {
		w.mode, w.reason = ModePoll, errors.New("poll mode requested")
		return w, w.probe()
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EROFS) {
			w.mode, w.reason = ModePoll, fmt.Errorf("open %s for writing: %w", path, err)
			return w, w.probe()
		}
		return nil, classifyPath(path, err)
	}
	// Only a kernel pressure file takes a trigger; anything else (a
	// recorded tree, a copy) must never be written to.
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil || (sfs.Type != unix.CGROUP2_SUPER_MAGIC && sfs.Type != unix.PROC_SUPER_MAGIC) {
		_ = unix.Close(fd)
		w.mode, w.reason = ModePoll, fmt.Errorf("%s is not on cgroup2 or procfs: %w", path, ErrNoTrigger)
		return w, w.probe()
	}
	err = writeTrigger(fd, trig)
	if widened := trig.widened(); err != nil && errors.Is(err, unix.EINVAL) && opts.WidenWindow && widened != trig {
		// Since Linux 6.5 a process without CAP_SYS_RESOURCE may only arm
		// triggers whose window is a multiple of 2 s (kernel/sched/psi.c,
		// psi_trigger_create); the kernel updates them from its 2 s
		// averaging work rather than its real-time poller.
		if werr := writeTrigger(fd, widened); werr == nil {
			w.fd, w.mode, w.armed = fd, ModeTrigger, widened
			return w, nil
		}
	}
	if err != nil {
		_ = unix.Close(fd)
		switch {
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.EBUSY), errors.Is(err, unix.EPERM),
			errors.Is(err, unix.EACCES), errors.Is(err, unix.EOPNOTSUPP):
			w.mode, w.reason = ModePoll, fmt.Errorf("write %q to %s: %w", trig, path, err)
			return w, w.probe()
		}
		return nil, fmt.Errorf("write %q to %s: %w", trig, path, err)
	}
	w.fd, w.mode, w.armed = fd, ModeTrigger, trig
	return w, nil
}

// writeTrigger arms trig on the pressure file open at fd. The kernel copies
// the string including its terminating NUL (psi_write copies at most
// sizeof(buf)-1 bytes and terminates it).
func writeTrigger(fd int, trig Trigger) error {
	_, err := unix.Write(fd, append([]byte(trig.String()), 0))
	return err
}

// Armed is the trigger armed on the file in trigger mode: the one asked
// for, or the same stall in a window widened to a multiple of 2 s where the
// kernel accepts only those. Zero in poll mode.
func (w *Watcher) Armed() Trigger { return w.armed }

// probe checks that the file can be read and parsed before poll mode relies on it.
func (w *Watcher) probe() error {
	_, err := readTotal(w.path, w.trig.Full, make([]byte, 256))
	return err
}

// Mode is the detection mode in use.
func (w *Watcher) Mode() WatchMode { return w.mode }

// FallbackReason says why the Watcher polls; nil in trigger mode.
func (w *Watcher) FallbackReason() error { return w.reason }

// Path is the watched pressure file.
func (w *Watcher) Path() string { return w.path }

// Close releases the trigger. Run must have returned.
func (w *Watcher) Close() error {
	if w.fd < 0 {
		return nil
	}
	err := unix.Close(w.fd)
	w.fd = -1
	if err != nil {
		return fmt.Errorf("close %s: %w", w.path, err)
	}
	return nil
}

// Run calls fn for each event until ctx is done, then returns ctx's error;
// it returns another error when the file can no longer be watched (the cgroup
// was removed). fn runs on Run's goroutine.
func (w *Watcher) Run(ctx context.Context, clock Clock, fn func(PressureEvent)) error {
	if clock == nil {
		clock = RealClock{}
	}
	if w.mode == ModeTrigger {
		return w.runTrigger(ctx, clock, fn)
	}
	return w.runPoll(ctx, clock, fn)
}

func (w *Watcher) runTrigger(ctx context.Context, clock Clock, fn func(PressureEvent)) error {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("eventfd: %w", err)
	}
	defer unix.Close(efd)
	stop := context.AfterFunc(ctx, func() {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		_, _ = unix.Write(efd, one[:])
	})
	defer stop()
	fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLPRI}, {Fd: int32(efd), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		_, err := unix.Poll(fds, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("poll %s: %w", w.path, err)
		}
		if fds[1].Revents != 0 {
			return ctx.Err()
		}
		r := fds[0].Revents
		if r&unix.POLLERR != 0 {
			// The kernel reports POLLERR when the cgroup was removed
			// (psi_trigger_poll on a destroyed trigger).
			return fmt.Errorf("poll %s: %w", w.path, ErrVanished)
		}
		if r&unix.POLLPRI != 0 {
			fn(PressureEvent{Path: w.path, Mode: ModeTrigger, Time: clock.Now()})
		}
	}
}

func (w *Watcher) runPoll(ctx context.Context, clock Clock, fn func(PressureEvent)) error {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	win := stallWindow{trig: w.trig}
	buf := make([]byte, 256)
	for {
		total, err := readTotal(w.path, w.trig.Full, buf)
		if err != nil {
			return err
		}
		now := clock.Now()
		if fire, stall := win.add(now, total); fire {
			fn(PressureEvent{Path: w.path, Mode: ModePoll, Time: now, Stall: stall})
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// readTotal reads a pressure file's some (or full) total in microseconds.
func readTotal(path string, full bool, buf []byte) (uint64, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, classifyPath(path, err)
	}
	defer unix.Close(fd)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return 0, classifyPath(path, err)
	}
	p, err := ParsePSI(buf[:n])
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	if full {
		if !p.HasFull {
			return 0, fmt.Errorf("%s: no full line: %w", path, ErrMissing)
		}
		return p.Full.Total, nil
	}
	return p.Some.Total, nil
}

func classifyPath(path string, err error) error {
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("open %s: %w (%w)", path, ErrVanished, err)
	}
	return fmt.Errorf("open %s: %w", path, err)
}
