// Package complaints is the status model's source for complain-mode
// seccomp profiles: it makes the kernel log SCMP_ACT_LOG hits
// (kernel.seccomp.actions_logged), reads their audit records from the
// audit netlink socket's read-log group, or else the kernel log (package
// kernel/seccomp/auditlog), finds each process's
// container through CRI by its cgroups (as shim/oom finds an OOM victim's),
// counts the would-be denials per container and syscall in the status
// document (seccompComplaints), and summarises them in the
// SeccompComplainClean condition, whose change the reporter turns into an
// Event.
package complaints

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/kernel/seccomp"
	"github.com/nodeshim/nodeshim/kernel/seccomp/auditlog"
	"github.com/nodeshim/nodeshim/runtimes/cri"
	"github.com/nodeshim/nodeshim/shim/status"
)

// Name is the source's name in the status document.
const Name = "seccomp-complaints"

// Reasons of SeccompComplainClean.
const (
	ReasonNoComplaints = "NoWouldBeDenials"
	ReasonWouldDeny    = "WouldDeny"
	ReasonNotWatched   = "NotWatched"
	ReasonNoProfiles   = "NoComplainModeProfiles"
)

// Containers finds the CRI container of a process (cri.CgroupIndex).
type Containers interface {
	Lookup(ctx context.Context, v cri.Victim) (cri.Workload, string, error)
}

// Source counts complain-mode seccomp hits until its context is done.
type Source struct {
	// Profiles are the profiles installed in complain mode; with none,
	// the source neither changes the sysctl nor reads the kernel log, and
	// SeccompComplainClean is True (NoComplainModeProfiles).
	Profiles []string
	// ProcRoot is the host's procfs ("/proc" when empty): its
	// sys/kernel/seccomp/actions_logged is set to include "log", and each
	// process's cgroups are read there.
	ProcRoot string
	// KmsgPath is where the audit records are read: auditlog.Netlink
	// (the default), falling back to the kernel log, auditlog.KmsgPath.
	KmsgPath string
	// Containers names each process's container; when nil and
	// RuntimeEndpoint is set, Run connects to it.
	Containers      Containers
	RuntimeEndpoint string
	// ResolveTimeout bounds the CRI calls of one lookup; 5 s when zero.
	ResolveTimeout time.Duration
	// Flush is how often the counts are handed to the model while they
	// grow (a new container or syscall is handed over at once); 1 s when
	// zero.
	Flush time.Duration
	// Logger receives one line per new container and syscall;
	// slog.Default() when nil.
	Logger *slog.Logger
}

// Name returns "seccomp-complaints".
func (s *Source) Name() string { return Name }

// NotStarted is what the model shows before the source first reports.
func NotStarted() condition.Condition {
	return condition.Condition{Type: status.TypeSeccompComplaints, Status: condition.Unknown, Reason: condition.ReasonNotStarted,
		Message: "complain-mode seccomp profiles are not watched yet"}
}

// key identifies one row of the counts: a container, or an unresolved
// command.
type key struct {
	containerID, comm string
}

// Run sets actions_logged, follows the kernel log and records the counts
// until ctx is done. When the kernel log cannot be read or the sysctl not
// set, SeccompComplainClean is Unknown with the reason and Run returns nil.
func (s *Source) Run(ctx context.Context, model *status.Model) error {
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	notWatched := func(err error) error {
		model.SetSeccompComplaints(status.SeccompComplaints{Reason: err.Error()})
		model.Set(condition.Condition{Type: status.TypeSeccompComplaints, Status: condition.Unknown, Reason: ReasonNotWatched,
			Message: "would-be denials of complain-mode profiles are not counted: " + err.Error()})
		log.Warn("complain-mode seccomp profiles are not watched", "err", err)
		return nil
	}
	if len(s.Profiles) == 0 {
		model.SetSeccompComplaints(status.SeccompComplaints{Reason: "no profile is installed in complain mode"})
		model.Set(condition.Condition{Type: status.TypeSeccompComplaints, Status: condition.True, Reason: ReasonNoProfiles,
			Message: "no seccomp profile is installed in complain mode (seccompComplain)"})
		<-ctx.Done()
		return nil
	}
	before, changed, err := seccomp.EnsureActionLogged(s.procRoot(), "log")
	if err != nil {
		return notWatched(err)
	}
	if changed {
		log.Info("the kernel now logs SCMP_ACT_LOG hits", "sysctl", "kernel.seccomp.actions_logged", "before", strings.Join(before, " "))
	}
	// The audit netlink socket's read-log group first: it has every
	// record; the kernel log only what its rate limit lets through.
	path := cmp.Or(s.KmsgPath, auditlog.Netlink)
	fl, err := auditlog.Open(path)
	if err != nil && path == auditlog.Netlink {
		log.Warn("audit records are read from the kernel log, through its rate limit", "err", err)
		fl, err = auditlog.Open(auditlog.KmsgPath)
	}
	if err != nil {
		return notWatched(err)
	}
	defer fl.Close()
	containers := s.Containers
	if containers == nil && s.RuntimeEndpoint != "" {
		x, closeCRI, err := s.dialIndex()
		if err != nil {
			log.Warn("complain-mode processes' containers are not resolved", "err", err)
		} else {
			defer closeCRI()
			containers = x
		}
	}

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	recs := make(chan auditlog.Record, 256)
	done := make(chan error, 1)
	go func() { done <- fl.Run(rctx, recs) }()

	doc := status.SeccompComplaints{Watching: true}
	rows := map[key]*status.ContainerComplaints{}
	// byPID remembers each process's row, so that a process logging
	// many calls costs one lookup; it is emptied when it grows large
	// (pids are reused).
	byPID := map[int]*status.ContainerComplaints{}
	publish := func() {
		doc.Suppressed = fl.Suppressed.Load()
		doc.Containers = doc.Containers[:0:0]
		for _, r := range rows {
			c := *r
			c.Syscalls = slices.Clone(r.Syscalls)
			doc.Containers = append(doc.Containers, c)
		}
		slices.SortFunc(doc.Containers, func(a, b status.ContainerComplaints) int {
			return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Pod, b.Pod),
				strings.Compare(a.Container, b.Container), strings.Compare(a.Comm, b.Comm))
		})
		model.SetSeccompComplaints(doc)
		model.Set(Condition(doc))
	}
	publish()
	flush := time.NewTicker(cmp.Or(s.Flush, time.Second))
	defer flush.Stop()
	dirty := false
	for {
		select {
		case <-ctx.Done():
			<-done
			return nil
		case err := <-done:
			if err == nil {
				err = errors.New("the kernel log ended")
			}
			doc.Watching, doc.Reason = false, err.Error()
			publish()
			return err
		case <-flush.C:
			if dirty {
				publish()
				dirty = false
			}
		case r := <-recs:
			if r.Action() != auditlog.RetLog {
				continue // a real denial the kernel logs anyway
			}
			name, err := seccomp.SyscallNameByAuditArch(r.Arch, r.Syscall)
			if err != nil {
				name = fmt.Sprintf("%d(arch %#x)", r.Syscall, r.Arch)
			}
			row, ok := byPID[r.PID]
			if !ok {
				if len(byPID) >= 4096 {
					clear(byPID)
				}
				row = s.row(ctx, containers, rows, r)
				byPID[r.PID] = row
			}
			doc.Total++
			dirty = true
			i, found := slices.BinarySearchFunc(row.Syscalls, name, func(c status.SyscallComplaint, n string) int { return strings.Compare(c.Name, n) })
			if found {
				row.Syscalls[i].Count++
				row.Syscalls[i].Last = r.Time
				continue
			}
			row.Syscalls = slices.Insert(row.Syscalls, i, status.SyscallComplaint{Name: name, Count: 1, First: r.Time, Last: r.Time})
			log.Info("a complain-mode seccomp profile would deny a syscall", "syscall", name, "pid", r.PID, "comm", r.Comm,
				"namespace", row.Namespace, "pod", row.Pod, "container", row.Container, "containerID", row.ContainerID)
			publish()
			dirty = false
		}
	}
}

// row finds or adds the row of the record's process.
func (s *Source) row(ctx context.Context, containers Containers, rows map[key]*status.ContainerComplaints, r auditlog.Record) *status.ContainerComplaints {
	c := status.ContainerComplaints{Comm: r.Comm}
	if containers == nil {
		c.Unresolved = "no container runtime to resolve containers with"
	} else {
		// The process may have exited since the record was written: its
		// cgroups are then unknown and so is its container.
		v := cri.Victim{}
		v.Cgroups, _ = cri.ProcCgroups(s.procRoot(), uint32(r.PID))
		if len(v.Cgroups) == 0 {
			c.Unresolved = fmt.Sprintf("process %d exited before its cgroups were read", r.PID)
		} else {
			lctx, cancel := context.WithTimeout(ctx, cmp.Or(s.ResolveTimeout, 5*time.Second))
			w, _, err := containers.Lookup(lctx, v)
			cancel()
			if err != nil {
				c.Unresolved = err.Error()
			} else {
				c = status.ContainerComplaints{Namespace: w.Namespace, Pod: w.Pod, PodUID: w.PodUID, Container: w.Container, ContainerID: w.ContainerID}
			}
		}
	}
	k := key{containerID: c.ContainerID}
	if k.containerID == "" {
		k.comm = c.Comm
	}
	if row, ok := rows[k]; ok {
		return row
	}
	rows[k] = &c
	return &c
}

// Condition is SeccompComplainClean for the counts doc.
func Condition(doc status.SeccompComplaints) condition.Condition {
	c := condition.Condition{Type: status.TypeSeccompComplaints}
	switch {
	case !doc.Watching:
		c.Status, c.Reason = condition.Unknown, ReasonNotWatched
		c.Message = "would-be denials of complain-mode profiles are not counted: " + doc.Reason
	case doc.Total == 0:
		c.Status, c.Reason = condition.True, ReasonNoComplaints
		c.Message = "no container under a complain-mode seccomp profile made a syscall its profile would deny"
	default:
		c.Status, c.Severity, c.Reason = condition.False, condition.SeverityInfo, ReasonWouldDeny
		var parts []string
		for _, r := range doc.Containers {
			who := r.Namespace + "/" + r.Pod + "/" + r.Container
			if r.ContainerID == "" {
				who = "process " + r.Comm + " (no container)"
			}
			names := make([]string, len(r.Syscalls))
			for i, sc := range r.Syscalls {
				names[i] = sc.Name
			}
			parts = append(parts, who+": "+strings.Join(names, ","))
		}
		// The message names containers and syscalls, not counts: it
		// changes when a new one appears, not on every call.
		c.Message = fmt.Sprintf("complain-mode seccomp profiles would deny syscalls in %d containers: %s",
			len(doc.Containers), strings.Join(parts, "; "))
		if doc.Suppressed > 0 {
			c.Message += fmt.Sprintf(" (the kernel log dropped %d audit records: counts are a lower bound)", doc.Suppressed)
		}
		if len(c.Message) > 1024 {
			c.Message = c.Message[:1000] + "... (nodeshim seccomp complaints lists them all)"
		}
	}
	return c
}

// dialIndex connects to RuntimeEndpoint and returns the index over it.
func (s *Source) dialIndex() (*cri.CgroupIndex, func(), error) {
	m, err := cgroup.FindMount(s.procRoot())
	if err != nil {
		return nil, nil, err
	}
	opts := cri.CgroupIndexOptions{CgroupV2: m.Path}
	r, err := cri.Dial(s.RuntimeEndpoint)
	if err != nil {
		return nil, nil, err
	}
	return cri.NewCgroupIndex(r.Client(), opts), func() { _ = r.Close() }, nil
}

func (s *Source) procRoot() string { return cmp.Or(s.ProcRoot, "/proc") }
