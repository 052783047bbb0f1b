package pod

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// freezePoll is how often freeze reads the cgroup's state back.
const freezePoll = time.Millisecond

// freezerFiles returns the file that freezes dir, the values that freeze
// and thaw it, the file that shows its state and the bytes there that say
// it is frozen: cgroup v1's freezer.state (FREEZING until every task of
// every descendant is frozen, then FROZEN; Documentation/admin-guide/
// cgroup-v1/freezer-subsystem.rst) or cgroup v2's cgroup.freeze, whose
// effect cgroup.events reports as "frozen 1" (Linux 5.2,
// Documentation/admin-guide/cgroup-v2.rst).
func freezerFiles(dir string) (ctl, on, off, state string, done []byte) {
	v1 := filepath.Join(dir, "freezer.state")
	if _, err := os.Stat(v1); err == nil {
		return v1, "FROZEN", "THAWED", v1, []byte("FROZEN")
	}
	return filepath.Join(dir, "cgroup.freeze"), "1", "0", filepath.Join(dir, "cgroup.events"), []byte("frozen 1")
}

// freeze freezes the cgroup dir and waits until all its tasks are frozen,
// at most limit and while ctx lasts; on failure it thaws dir again.
func freeze(ctx context.Context, dir string, limit time.Duration) (time.Time, error) {
	ctl, on, _, state, done := freezerFiles(dir)
	if err := writeCgroupFile(ctl, on); err != nil {
		return time.Time{}, fmt.Errorf("freeze %s: %w", dir, err)
	}
	deadline := time.Now().Add(limit)
	for {
		b, err := os.ReadFile(state)
		if err == nil && bytes.Contains(b, done) {
			return time.Now(), nil
		}
		var why error
		switch {
		case err != nil:
			why = err
		case ctx.Err() != nil:
			why = ctx.Err()
		case time.Now().After(deadline):
			why = fmt.Errorf("%w within %s (%s: %q)", ErrNotFrozen, limit, filepath.Base(state), bytes.TrimSpace(b))
		}
		if why != nil {
			return time.Time{}, errors.Join(fmt.Errorf("freeze %s: %w", dir, why), thaw(dir))
		}
		time.Sleep(freezePoll)
	}
}

// freezePod freezes the pod's cgroup, and so every task of the pod at
// one instant, then hands the freeze over to each container's own cgroup
// (frozen too, self-freezing, while the pod's freeze still holds them)
// and thaws the pod's cgroup: the containers stay frozen, the sandbox's
// pause process runs on. CRIU needs that hand-over: it seizes a frozen
// container and then thaws the container's cgroup so that the seized
// tasks enter their ptrace stop (criu/seize.c, freeze_processes), which a
// frozen parent cgroup would forbid ("Unseizable non-zombie ... state D");
// CRIU freezes the container's cgroup again after the dump
// (freezer_restore_state). No container task runs between the pod's
// freeze and thawPod.
func freezePod(ctx context.Context, pod string, containers []string, limit time.Duration) (time.Time, error) {
	at, err := freeze(ctx, pod, limit)
	if err != nil {
		return time.Time{}, err
	}
	for _, c := range containers {
		ctl, on, _, _, _ := freezerFiles(c)
		if err := writeCgroupFile(ctl, on); err != nil {
			return time.Time{}, errors.Join(fmt.Errorf("freeze %s: %w", c, err), thawPod(pod, containers, limit))
		}
	}
	if err := thaw(pod); err != nil {
		return time.Time{}, errors.Join(fmt.Errorf("thaw %s: %w", pod, err), thawPod(pod, containers, limit))
	}
	return at, nil
}

// thawPod thaws the containers of the pod at one instant: it freezes the
// pod's cgroup again, thaws each container's cgroup (they stay frozen by
// the pod's freeze) and thaws the pod's cgroup. If the pod's cgroup does
// not freeze within limit, the containers are thawed one by one.
func thawPod(pod string, containers []string, limit time.Duration) error {
	var errs []error
	_, ferr := freeze(context.Background(), pod, limit)
	for _, c := range containers {
		if err := thaw(c); err != nil {
			errs = append(errs, fmt.Errorf("thaw %s: %w", c, err))
		}
	}
	if ferr == nil {
		if err := thaw(pod); err != nil {
			errs = append(errs, fmt.Errorf("thaw %s: %w", pod, err))
		}
	}
	return errors.Join(errs...)
}

// thaw thaws the cgroup dir. A cgroup that is gone has nothing left to
// thaw: a lazy pod checkpoint's containers end once their memory is
// fetched, and their pod may be deleted before the thaw.
func thaw(dir string) error {
	ctl, _, off, _, _ := freezerFiles(dir)
	err := writeCgroupFile(ctl, off)
	if _, serr := os.Stat(dir); err != nil && errors.Is(serr, os.ErrNotExist) {
		return nil
	}
	return err
}

// writeCgroupFile writes v to the cgroup control file p, which exists.
func writeCgroupFile(p, v string) error {
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(v)
	return errors.Join(werr, f.Close())
}
