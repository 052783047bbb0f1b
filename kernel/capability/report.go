package capability

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// The header of every report; docs/report.md documents the schema of this
// version. Fields are only ever added within a version.
const (
	ReportAPIVersion = "nodeshim.io/v1alpha1"
	ReportKind       = "KernelReport"
)

// Report is what `nodeshim report` prints: the kernel's identity and the
// verdict on every requirement, with evidence.
type Report struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// GeneratedAt is when collection started.
	GeneratedAt time.Time `json:"generatedAt"`
	// ElapsedMicroseconds is how long collection took, probes included.
	ElapsedMicroseconds int64 `json:"elapsedMicroseconds"`
	// Kernel is the kernel's identity, config source and cgroup layout.
	Kernel Kernel `json:"kernel"`
	// Sysctls are the Kubernetes safe sysctls as read through /proc/sys.
	Sysctls []Sysctl `json:"sysctls"`
	// Requirements are the verdicts, in catalogue order.
	Requirements []Result `json:"requirements"`
	// Summary counts the verdicts.
	Summary Summary `json:"summary"`
}

// Result is the verdict on one requirement.
type Result struct {
	ID       string   `json:"id"`
	Group    string   `json:"group"`
	NeededBy []string `json:"neededBy"`
	// MinKernel is the first upstream kernel with the feature,
	// "major.minor.patch"; empty when there is no threshold.
	MinKernel string `json:"minKernel,omitempty"`
	// Verdict is the probe's verdict: what the kernel was found to do.
	Verdict Verdict `json:"verdict"`
	// Evidence is one line an operator can check by hand.
	Evidence string `json:"evidence"`
	// VersionVerdict is what the kernel version alone would say; empty
	// when there is no MinKernel.
	VersionVerdict Verdict `json:"versionVerdict,omitempty"`
	// Mismatch flags a disagreement between VersionVerdict and Verdict.
	Mismatch Mismatch `json:"mismatch,omitempty"`
	// ElapsedMicroseconds is how long the probe took.
	ElapsedMicroseconds int64 `json:"elapsedMicroseconds"`
}

// Summary counts the verdicts of a report.
type Summary struct {
	Total       int `json:"total"`
	Supported   int `json:"supported"`
	Degraded    int `json:"degraded"`
	Unsupported int `json:"unsupported"`
	Unknown     int `json:"unknown"`
	// Mismatches counts results whose version and probe verdicts disagree.
	Mismatches int `json:"mismatches"`
}

func newResult(r Requirement, k Kernel, f Finding, elapsed time.Duration) Result {
	res := Result{
		ID:                  r.ID,
		Group:               r.Group,
		NeededBy:            slices.Clone(r.NeededBy),
		Verdict:             f.Verdict,
		Evidence:            f.Evidence,
		VersionVerdict:      VersionVerdict(r, k),
		ElapsedMicroseconds: elapsed.Microseconds(),
	}
	if res.NeededBy == nil {
		res.NeededBy = []string{}
	}
	if !r.MinKernel.IsZero() {
		res.MinKernel = r.MinKernel.String()
	}
	res.Mismatch = mismatchOf(res.VersionVerdict, res.Verdict)
	return res
}

func newReport(node Node, results []Result, start time.Time, elapsed time.Duration) *Report {
	r := &Report{
		APIVersion:          ReportAPIVersion,
		Kind:                ReportKind,
		GeneratedAt:         start.UTC(),
		ElapsedMicroseconds: elapsed.Microseconds(),
		Kernel:              node.Kernel,
		Sysctls:             node.Sysctls,
		Requirements:        results,
	}
	if r.Sysctls == nil {
		r.Sysctls = []Sysctl{}
	}
	for _, res := range results {
		r.Summary.add(res)
	}
	return r
}

func (s *Summary) add(r Result) {
	s.Total++
	switch r.Verdict {
	case Supported:
		s.Supported++
	case Degraded:
		s.Degraded++
	case Unsupported:
		s.Unsupported++
	default:
		s.Unknown++
	}
	if r.Mismatch != "" {
		s.Mismatches++
	}
}

// Result returns the result for the requirement id.
func (r *Report) Result(id string) (Result, bool) {
	for _, res := range r.Requirements {
		if res.ID == id {
			return res, true
		}
	}
	return Result{}, false
}

// Groups returns the group names in the order they first appear.
func (r *Report) Groups() []string {
	var gs []string
	for _, res := range r.Requirements {
		if !slices.Contains(gs, res.Group) {
			gs = append(gs, res.Group)
		}
	}
	return gs
}

// Table renders the report for people: the identity, then one row per
// requirement, grouped, with the evidence; mismatches between the version
// and the probe are marked in the BY VERSION column.
func (r *Report) Table() string {
	var b strings.Builder
	k := r.Kernel
	hw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	if k.Error != "" {
		fmt.Fprintf(hw, "KERNEL\t%s\n", k.Error)
	} else {
		suffix := k.Suffix
		if suffix == "" {
			suffix = "none"
		}
		fmt.Fprintf(hw, "KERNEL\t%s (version %s, suffix %s)\n", k.Raw, k.Version, suffix)
	}
	fmt.Fprintf(hw, "PLATFORM\t%s/%s (machine %s)\n", orDash(k.OS), orDash(k.Arch), orDash(k.Machine))
	var labels []string
	for _, name := range []string{"kubernetes.io/arch", "kubernetes.io/os"} {
		if v, ok := k.Labels[name]; ok {
			labels = append(labels, name+"="+v)
		}
	}
	fmt.Fprintf(hw, "LABELS\t%s\n", orDash(strings.Join(labels, " ")))
	if k.Config.Source != "" {
		fmt.Fprintf(hw, "CONFIG\t%s (%d options set)\n", k.Config.Source, k.Config.Options)
	} else {
		fmt.Fprintf(hw, "CONFIG\tnone: %s\n", k.Config.Error)
	}
	cg := string(k.Cgroup.Mode)
	if k.Cgroup.V2 != "" {
		cg += ", cgroup2 at " + k.Cgroup.V2
	}
	fmt.Fprintf(hw, "CGROUPS\t%s\n", cg)
	hw.Flush()
	b.WriteString("\n")

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tREQUIREMENT\tVERDICT\tMIN KERNEL\tBY VERSION\tEVIDENCE")
	for _, g := range r.Groups() {
		first := true
		for _, res := range r.Requirements {
			if res.Group != g {
				continue
			}
			group := ""
			if first {
				group, first = g, false
			}
			byVersion := orDash(string(res.VersionVerdict))
			if res.Mismatch != "" {
				byVersion += " (" + string(res.Mismatch) + "!)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", group, res.ID, res.Verdict, orDash(res.MinKernel), byVersion, res.Evidence)
		}
	}
	tw.Flush()
	s := r.Summary
	fmt.Fprintf(&b, "\n%d requirements: %d Supported, %d Degraded, %d Unsupported, %d Unknown",
		s.Total, s.Supported, s.Degraded, s.Unsupported, s.Unknown)
	if s.Mismatches > 0 {
		fmt.Fprintf(&b, "; %d where the kernel version and the probe disagree (!)", s.Mismatches)
	}
	b.WriteString("\n")
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
