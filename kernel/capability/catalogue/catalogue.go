// Package catalogue assembles nodeshim's full requirement catalogue: the
// kernel package's entries followed by those of the facility packages
// (seccomp, eBPF, CRIU), each of which keeps its probes next to the code
// that needs them. It sits above all of them: they depend on package
// capability for their vocabulary, and only this package knows the list.
package catalogue

import (
	"github.com/nodeshim/nodeshim/bpf"
	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/kernel/seccomp"
)

// With is the catalogue of `nodeshim report`, with the options of its CRIU
// entries (the cache of `criu check` results).
func With(criuOpts criu.ReportOptions) []capability.Requirement {
	reqs := kernel.Catalogue()
	reqs = append(reqs, seccomp.Requirements()...)
	reqs = append(reqs, bpf.Requirements()...)
	reqs = append(reqs, criu.RequirementsWith(criuOpts)...)
	return reqs
}
