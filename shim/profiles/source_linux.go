// Package profiles delivers the Localhost seccomp profiles of nodeshim's
// configuration to the node: it installs them under the kubelet's seccomp
// root (<kubelet root-dir>/seccomp), where pods reference them by name
// (securityContext.seccompProfile.localhostProfile), and removes those it
// installed that are no longer configured. Each profile is validated and
// compiled for the node first; a set with a bad profile installs nothing.
// What it installed is recorded in a manifest in nodeshim's state
// directory: a file it did not install is never replaced or removed.
//
// The status model shows the installed profiles (name, path, SHA-256,
// install time) and the SeccompProfilesReady condition. An installed
// profile edited or removed on the node is put back from the configuration
// (drift_linux.go), shown in the status's repairs and the
// SeccompProfilesUnchanged condition.
package profiles

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/kernel/seccomp"
	"github.com/nodeshim/nodeshim/shim/status"
)

// Name is the source's name in the status document.
const Name = "seccomp-profiles"

// Reasons of SeccompProfilesReady.
const (
	ReasonInstalled       = "Installed"
	ReasonNoProfiles      = "NoProfiles"
	ReasonInvalidProfile  = "InvalidProfile"
	ReasonProfileConflict = "ProfileConflict"
	ReasonInstallFailed   = "InstallFailed"
)

// SeccompRoot is the kubelet's seccomp root under its root dir.
func SeccompRoot(kubeletRoot string) string { return filepath.Join(kubeletRoot, "seccomp") }

// Source installs a set of profiles when it starts, and reports them; the
// daemon restarts it with the new set when the active configuration
// changes. An install that fails on the node (a conflict, an I/O error) is
// retried with backoff; an invalid profile is not, since only another
// configuration can fix it.
type Source struct {
	// Installer installs the profiles.
	Installer *Installer
	// Profiles are the configured profiles, by name.
	Profiles map[string]string
	// Retry is the first wait after a failure (doubling up to 5 minutes);
	// 10 s when zero.
	Retry time.Duration
	// Logger receives the failures; slog.Default() when nil.
	Logger *slog.Logger
	// Check is how often the installed files are compared with what was
	// written, besides when fsnotify reports a change in their
	// directories; 10 s when zero. DriftHold is how long
	// SeccompProfilesUnchanged stays False after a repair; 10 minutes
	// when zero.
	Check, DriftHold time.Duration
	// Clock drives the checks; the real clock when nil.
	Clock clock.WithTicker
}

func (s *Source) clock() clock.WithTicker {
	if s.Clock == nil {
		return clock.RealClock{}
	}
	return s.Clock
}

// Name returns "seccomp-profiles".
func (s *Source) Name() string { return Name }

// NotStarted is what the model shows before the source first reports.
func NotStarted() condition.Condition {
	return condition.Condition{Type: status.TypeSeccompProfiles, Status: condition.Unknown, Reason: condition.ReasonNotStarted,
		Message: "the seccomp profiles have not been installed yet"}
}

// Run installs the profiles, records the outcome, and waits for ctx.
func (s *Source) Run(ctx context.Context, model *status.Model) error {
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	retry := s.Retry
	if retry <= 0 {
		retry = 10 * time.Second
	}
	for {
		installed, err := s.Installer.Apply(s.Profiles)
		model.SetSeccompProfiles(status.SeccompProfiles{Root: s.Installer.Root, Installed: statusList(installed)})
		c := Condition(s.Installer.Root, len(s.Profiles), installed, err)
		model.Set(c)
		wait := retry
		switch {
		case err == nil:
			wait = 0
		case c.Reason == ReasonInvalidProfile:
			log.Error("seccomp profiles not installed", "err", err)
			wait = 0
		default:
			log.Error("seccomp profiles not installed", "err", err, "retryIn", retry)
			retry = min(2*retry, 5*time.Minute)
		}
		if wait == 0 {
			if err == nil && len(installed) > 0 {
				// An installed profile edited or removed on the node is
				// put back from the configuration.
				s.watchDrift(ctx, model, log, installed)
			}
			<-ctx.Done()
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

func statusList(in []Installed) []status.InstalledProfile {
	out := make([]status.InstalledProfile, len(in))
	for i, p := range in {
		out[i] = status.InstalledProfile{Name: p.Name, Path: p.Path, SHA256: p.SHA256, InstalledAt: p.InstalledAt}
	}
	return out
}

// Condition is SeccompProfilesReady after an Apply of configured profiles
// that returned installed and err.
func Condition(root string, configured int, installed []Installed, err error) condition.Condition {
	c := condition.Condition{Type: status.TypeSeccompProfiles}
	if err == nil {
		if configured == 0 {
			c.Status, c.Reason, c.Message = condition.True, ReasonNoProfiles, "no seccomp profiles configured"
			return c
		}
		names := make([]string, len(installed))
		for i, p := range installed {
			names[i] = p.Name
		}
		c.Status, c.Reason = condition.True, ReasonInstalled
		c.Message = fmt.Sprintf("%d Localhost profiles installed under %s: %s", len(installed), root, strings.Join(names, ", "))
		return c
	}
	c.Status, c.Severity = condition.False, condition.SeverityError
	c.Reason = reason(err)
	kept := "none were installed before"
	if len(installed) > 0 {
		kept = fmt.Sprintf("the %d installed before stay", len(installed))
	}
	c.Message = fmt.Sprintf("%s; no profile of this configuration is installed, %s",
		strings.ReplaceAll(err.Error(), "\n", "; "), kept)
	if c.Reason == ReasonInstallFailed {
		c.Message = fmt.Sprintf("%s; %d profiles in place", strings.ReplaceAll(err.Error(), "\n", "; "), len(installed))
	}
	return c
}

// Retryable reports whether err, of Check or Apply, holds no problem of the
// configuration itself: only failures that another attempt may not have
// (I/O on the node, a registry that could not be reached).
func Retryable(err error) bool { return err != nil && reason(err) == ReasonInstallFailed }

// Node returns the parse options of the running node, with the container
// capabilities of a pod that asks for none (seccomp.DefaultCaps): the
// node a profile is checked and compiled for.
func Node() seccomp.ParseOptions { return seccomp.NodeParseOptions(nil) }

// reason classifies an Apply error: any invalid profile makes it
// InvalidProfile (another configuration is needed), else a file in the way
// (one nodeshim did not install, a symbolic link, a file where a directory
// should be) ProfileConflict, else InstallFailed (a registry that could
// not be reached among them).
func reason(err error) string {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	r := ReasonInstallFailed
	for _, e := range errs {
		var pe *ProfileError
		if !errors.As(e, &pe) {
			continue
		}
		if errors.Is(pe, errdefs.ErrUnavailable) {
			// A registry that could not be reached: tried again.
			continue
		}
		if !errors.Is(pe, ErrForeign) && !errors.Is(pe, ErrSymlink) && !errors.Is(pe, ErrNotDir) {
			return ReasonInvalidProfile
		}
		r = ReasonProfileConflict
	}
	return r
}
