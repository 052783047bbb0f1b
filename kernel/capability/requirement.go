// Package capability is the vocabulary of nodeshim's capability report:
// a requirement that something has of the node, the finding of its probe
// and the verdict, the collector that runs the probes, and the report with
// its renderings (table, JSON and YAML through the struct tags, and
// node-feature-discovery features). The kernel package and the facility
// packages (seccomp, bpf, criu) each contribute requirements with probes;
// this package knows none of them.
package capability

import (
	"context"
	"fmt"
	"time"
)

// Verdict is what nodeshim concludes about one requirement on this node.
type Verdict string

// The verdicts, from best to worst; Unknown means a probe could not decide
// and always carries the reason in the evidence.
const (
	Supported   Verdict = "Supported"
	Degraded    Verdict = "Degraded"
	Unsupported Verdict = "Unsupported"
	Unknown     Verdict = "Unknown"
)

// Finding is the outcome of one probe: a verdict and one line of evidence
// that an operator can check by hand (a file and its content, a syscall and
// its errno, a tool's own message).
type Finding struct {
	Verdict  Verdict `json:"verdict"`
	Evidence string  `json:"evidence"`
}

// Findingf returns a Finding with formatted evidence.
func Findingf(v Verdict, format string, args ...any) Finding {
	return Finding{Verdict: v, Evidence: fmt.Sprintf(format, args...)}
}

// Version is a kernel version, major.minor.patch, comparable.
type Version struct {
	Major int `json:"major"`
	Minor int `json:"minor"`
	Patch int `json:"patch"`
}

// V returns the Version major.minor.patch.
func V(major, minor, patch int) Version { return Version{major, minor, patch} }

// IsZero reports whether v is unset.
func (v Version) IsZero() bool { return v == Version{} }

// Compare returns -1, 0 or +1 as v is older than, equal to or newer than w.
func (v Version) Compare(w Version) int {
	for _, d := range [3]int{v.Major - w.Major, v.Minor - w.Minor, v.Patch - w.Patch} {
		switch {
		case d < 0:
			return -1
		case d > 0:
			return 1
		}
	}
	return 0
}

// AtLeast reports whether v is w or newer.
func (v Version) AtLeast(w Version) bool { return v.Compare(w) >= 0 }

// String formats v as major.minor.patch.
func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Requirement is one entry of the requirement catalogue: something that a
// Kubernetes or nodeshim feature needs from the kernel, the oldest kernel
// that has it upstream, and a real probe that finds out whether this kernel
// has it. Adding a requirement is adding one Requirement value.
type Requirement struct {
	// ID is stable and dotted, e.g. "cgroup.v2" or "ebpf.ringbuf".
	ID string `json:"id"`
	// Group collects related requirements in the table: "cgroup", "psi",
	// "seccomp", "ebpf", "nftables", "criu", "mounts", "userns", "sysctl".
	Group string `json:"group"`
	// NeededBy names what needs it, e.g. "Kubernetes: kube-proxy nftables
	// mode" or "nodeshim: OOM watcher".
	NeededBy []string `json:"neededBy"`
	// MinKernel is the first upstream kernel with the feature; zero when
	// the requirement has no version threshold.
	MinKernel Version `json:"minKernel,omitzero"`
	// Probe finds out whether the running kernel has the feature. It must
	// not panic; a probe that cannot decide returns Unknown with the reason.
	Probe func(ctx context.Context, h Host) Finding `json:"-"`
	// Slow marks a probe that runs a program, forks, or waits on the
	// kernel (a kthread, a tool's self-check). The collector starts slow
	// probes first, each on its own goroutine, so that they overlap with
	// the many quick file reads instead of ending the report.
	Slow bool `json:"-"`
	// Waits marks a slow probe that spends most of its time waiting rather
	// than computing: on child processes, or on the kernel's RCU grace
	// periods when a program detaches. The collector starts these before
	// the other slow probes, so that their waits overlap the others' work
	// instead of following it. It needs Slow.
	Waits bool `json:"-"`
	// PerBoot marks a probe whose finding holds for the rest of the boot
	// for the same binary and privileges (it loads programs into this
	// kernel, or asks the kernel something no setting changes), so that a
	// BootCache may answer it in later runs instead of probing again.
	PerBoot bool `json:"-"`
	// Timeout is the least time a probe known to take longer (a tool's
	// full self-check) gets, whatever shorter per-probe timeout the
	// collector has; a longer collector timeout applies to it too. Zero
	// means the collector's.
	Timeout time.Duration `json:"-"`
}
