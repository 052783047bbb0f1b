// Package oom is the status model's source for OOM kills: it attaches the
// eBPF OOM watcher (package bpf), records every kill in the status
// document's bounded history, and says in OOMWatcherReady whether kills are
// watched at all, and how or why not.
package oom

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nodeshim/nodeshim/bpf"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/shim/condition"
	"github.com/nodeshim/nodeshim/shim/status"
)

// Reasons of OOMWatcherReady.
const (
	ReasonAttached             = "Attached"
	ReasonNotSupportedByKernel = "NotSupportedByKernel"
	ReasonAttachFailed         = "AttachFailed"
	ReasonEventStreamEnded     = "EventStreamEnded"
)

// Name is the source's name in the status document.
const Name = "oom"

// Requirement is the OOM watcher's entry in the capability report.
const Requirement = "ebpf.oom-watcher"

// Source watches OOM kills until its context is done, then detaches.
type Source struct {
	// Hooks overrides the watcher's hooks (bpf.DefaultOOMHooks when nil).
	Hooks []bpf.OOMHook
	// Logger receives one line per kill; slog.Default() when nil.
	Logger *slog.Logger
}

// Name returns "oom".
func (s *Source) Name() string { return Name }

// NotStarted is what the model shows before the source first reports.
func NotStarted() condition.Condition {
	return condition.Condition{Type: status.TypeOOMWatcher, Status: condition.Unknown, Reason: "NotStarted",
		Message: "the OOM watcher has not started"}
}

// Run attaches the watcher and records every OOM kill until ctx is done.
// When it cannot attach, OOMWatcherReady says why: False (Warning) when the
// capability report found the kernel unable to run it, Unknown otherwise;
// the document then says that kills are not watched instead of showing an
// empty, healthy-looking history, and Run returns nil (Done).
func (s *Source) Run(ctx context.Context, model *status.Model) error {
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	w, err := bpf.WatchOOM(bpf.OOMOptions{Hooks: s.Hooks})
	if err != nil {
		c := failure(model.Report(), err)
		model.SetOOMWatch(false, "", c.Message)
		model.Set(c)
		log.Warn("OOM kills are not watched", "reason", c.Reason, "err", err)
		return nil
	}
	defer w.Close()
	model.SetOOMWatch(true, string(w.Hook()), "")
	model.Set(condition.Condition{Type: status.TypeOOMWatcher, Status: condition.True, Reason: ReasonAttached,
		Message: fmt.Sprintf("attached to %s, events over %s", w.Hook(), w.Transport())})
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events():
			if !ok {
				err := w.Err()
				if err == nil {
					err = errors.New("the OOM event stream ended")
				}
				model.SetOOMWatch(false, string(w.Hook()), err.Error())
				model.Set(condition.Condition{Type: status.TypeOOMWatcher, Status: condition.Unknown, Reason: ReasonEventStreamEnded,
					Message: err.Error()})
				return err
			}
			log.Warn("OOM kill", "pid", ev.PID, "tgid", ev.TGID, "comm", ev.Comm, "cgroupID", ev.CgroupID, "rssBytes", ev.RSSBytes)
			model.AddOOMKill(status.OOMKill{Time: ev.Time, PID: ev.PID, TGID: ev.TGID, Comm: ev.Comm, CgroupID: ev.CgroupID,
				RSSBytes: ev.RSSBytes, TotalVMBytes: ev.TotalVMBytes, OOMScoreAdj: ev.OOMScoreAdj})
		}
	}
}

// failure is OOMWatcherReady when the watcher could not attach.
func failure(rep *capability.Report, err error) condition.Condition {
	if rep != nil {
		if res, ok := rep.Result(Requirement); ok && res.Verdict == capability.Unsupported {
			return condition.Condition{Type: status.TypeOOMWatcher, Status: condition.False, Severity: condition.SeverityWarning,
				Reason: ReasonNotSupportedByKernel, Message: fmt.Sprintf("OOM kills are not watched: %s", res.Evidence)}
		}
	}
	return condition.Condition{Type: status.TypeOOMWatcher, Status: condition.Unknown, Reason: ReasonAttachFailed,
		Message: fmt.Sprintf("OOM kills are not watched: %v", err)}
}
