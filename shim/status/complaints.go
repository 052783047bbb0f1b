package status

import (
	"slices"
	"time"
)

// TypeSeccompComplaints is True while no container under a complain-mode
// seccomp profile made a syscall its profile would deny, False (Info) once
// one did, and Unknown while such syscalls are not watched.
const TypeSeccompComplaints = "SeccompComplainClean"

// SeccompComplaints are the syscalls that containers under complain-mode
// seccomp profiles made and their profiles would deny (SCMP_ACT_LOG hits
// in the kernel's audit records), counted per container and syscall since
// nodeshim started.
type SeccompComplaints struct {
	// Watching says whether the kernel log is read; Reason why not.
	Watching bool   `json:"watching"`
	Reason   string `json:"reason,omitempty"`
	// Total counts every would-be denial seen.
	Total uint64 `json:"total"`
	// Suppressed counts the audit records the kernel did not print to its
	// log (its printk rate limit): while it is not zero, the counts are a
	// lower bound.
	Suppressed uint64 `json:"suppressed"`
	// Containers lists them per container, sorted by namespace, pod,
	// container; a process not in a known container is listed with its
	// command name (Comm) and no container.
	Containers []ContainerComplaints `json:"containers"`
}

// ContainerComplaints are one container's would-be denials.
type ContainerComplaints struct {
	Namespace   string `json:"namespace,omitempty"`
	Pod         string `json:"pod,omitempty"`
	PodUID      string `json:"podUID,omitempty"`
	Container   string `json:"container,omitempty"`
	ContainerID string `json:"containerID,omitempty"`
	// Comm is the command name of the processes, for a process not
	// resolved to a container; Unresolved says why it was not.
	Comm       string `json:"comm,omitempty"`
	Unresolved string `json:"unresolved,omitempty"`
	// Syscalls are the syscalls by name, sorted.
	Syscalls []SyscallComplaint `json:"syscalls"`
}

// SyscallComplaint is how often one syscall would have been denied.
type SyscallComplaint struct {
	Name  string    `json:"name"`
	Count uint64    `json:"count"`
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
}

// SetSeccompComplaints records the complain-mode counts; the source
// hands over a copy it does not change afterwards.
func (m *Model) SetSeccompComplaints(c SeccompComplaints) {
	c.Containers = slices.Clone(c.Containers)
	if c.Containers == nil {
		c.Containers = []ContainerComplaints{}
	}
	m.mu.Lock()
	m.complaints = &c
	m.bumpLocked()
	m.mu.Unlock()
}
