package profiles

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/shim/status"
)

// Reasons of SeccompProfilesUnchanged.
const (
	ReasonNoDrift      = "NoDrift"
	ReasonRepaired     = "DriftRepaired"
	ReasonRepairFailed = "RepairFailed"
)

// Changes a drift check finds in an installed profile's file.
const (
	ChangeEdited  = "edited"
	ChangeRemoved = "removed"
)

// maxRepairs is how many repairs the status keeps, newest last.
const maxRepairs = 20

// Drift is an installed profile whose file no longer holds what nodeshim
// wrote.
type Drift struct {
	Installed
	// Change is ChangeEdited or ChangeRemoved; Found is the SHA-256 of
	// what the file holds now ("" when removed).
	Change string
	Found  string
}

// CheckDrift compares each installed profile's file with the content
// nodeshim wrote (its SHA-256 in the manifest), read below its root
// without following a symbolic link (a link put in its place is an edit).
func CheckDrift(installed []Installed) []Drift {
	var out []Drift
	for _, p := range installed {
		switch h := hashInstalled(p); {
		case h == p.SHA256:
		case h == "" && !exists(p):
			out = append(out, Drift{Installed: p, Change: ChangeRemoved})
		default:
			out = append(out, Drift{Installed: p, Change: ChangeEdited, Found: h})
		}
	}
	return out
}

// exists reports whether anything is at the profile's path below its root
// (a file that hashInstalled cannot read, a FIFO, a link).
func exists(p Installed) bool {
	r, err := openRoot(rootOf(p), false)
	if err != nil || r == nil {
		return false
	}
	defer r.close()
	ok, err := r.check(p.Name)
	return ok || err != nil
}

// watchDrift checks the installed profiles when a file changes in their
// directories (fsnotify) and every s.Check, puts back what changed with
// Apply, and reports it in SeccompProfilesUnchanged and the status's
// repairs, until ctx is done.
func (s *Source) watchDrift(ctx context.Context, model *status.Model, log *slog.Logger, installed []Installed) {
	clk := s.clock()
	every := s.Check
	if every <= 0 {
		every = 10 * time.Second
	}
	hold := s.DriftHold
	if hold <= 0 {
		hold = 10 * time.Minute
	}
	var events <-chan fsnotify.Event
	if w, err := fsnotify.NewWatcher(); err != nil {
		log.Warn("seccomp profile changes are found by the periodic check only", "err", err, "every", every)
	} else {
		defer w.Close()
		dirs := map[string]bool{}
		for _, p := range installed {
			dirs[filepath.Dir(p.Path)] = true
		}
		for d := range dirs {
			if err := w.Add(d); err != nil {
				log.Warn("seccomp profile changes in a directory are found by the periodic check only", "dir", d, "err", err)
			}
		}
		events = w.Events
	}
	tick := clk.NewTicker(every)
	defer tick.Stop()
	var repairs []status.ProfileRepair
	var lastRepair time.Time
	unchanged := condition.Condition{Type: status.TypeSeccompProfilesDrift, Status: condition.True, Reason: ReasonNoDrift,
		Message: fmt.Sprintf("the %d installed profiles hold what nodeshim wrote", len(installed))}
	model.Set(unchanged)
	for {
		select {
		case <-ctx.Done():
			return
		case <-events:
		case <-tick.C():
			if !lastRepair.IsZero() && clk.Since(lastRepair) >= hold {
				lastRepair = time.Time{}
				model.Set(unchanged)
			}
		}
		drift := CheckDrift(installed)
		if len(drift) == 0 {
			continue
		}
		now := clk.Now().UTC()
		var what []string
		for _, d := range drift {
			what = append(what, fmt.Sprintf("%s %s", d.Path, d.Change))
			log.Warn("seccomp profile changed on the node; putting it back", "name", d.Name, "path", d.Path, "change", d.Change,
				"installed", d.SHA256, "found", d.Found)
		}
		after, err := s.Installer.Apply(s.Profiles)
		for _, d := range drift {
			repairs = append(repairs, status.ProfileRepair{Name: d.Name, Path: d.Path, Change: d.Change, FoundSHA256: d.Found, At: now, Restored: err == nil})
		}
		if len(repairs) > maxRepairs {
			repairs = slices.Clone(repairs[len(repairs)-maxRepairs:])
		}
		model.SetSeccompProfiles(status.SeccompProfiles{Root: s.Installer.Root, Installed: statusList(after), Repairs: repairs})
		c := condition.Condition{Type: status.TypeSeccompProfilesDrift, Status: condition.False, Severity: condition.SeverityWarning,
			Reason: ReasonRepaired, Message: fmt.Sprintf("changed on the node and put back from the configuration at %s: %s",
				now.Format(time.RFC3339), strings.Join(what, ", "))}
		if err != nil {
			c.Severity, c.Reason = condition.SeverityError, ReasonRepairFailed
			c.Message = fmt.Sprintf("changed on the node and not put back: %s: %s", strings.Join(what, ", "), strings.ReplaceAll(err.Error(), "\n", "; "))
			log.Error("seccomp profiles not put back", "err", err)
		} else {
			installed = after
		}
		model.Set(c)
		lastRepair = now
	}
}
