// Package report runs nodeshim's kernel capability report, for `nodeshim
// report` and for serve alike: the full requirement catalogue (the kernel
// package's entries followed by those of the facility packages: seccomp,
// eBPF, CRIU, each keeping its probes next to the code that needs them),
// and the on-disk caches of what holds for one boot. It sits above the
// facilities it lists: they depend on package capability for their
// vocabulary, and only this package knows the list.
package report

import (
	"github.com/nodeshim/nodeshim/bpf"
	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/kernel/seccomp"
)

// Catalogue is the catalogue of `nodeshim report` with every probe live:
// no verdict is taken from a cache.
func Catalogue() []capability.Requirement {
	return catalogueWith(criu.ReportOptions{})
}

// catalogueWith is the catalogue with the options of its CRIU entries (the
// cache of `criu check` results).
func catalogueWith(criuOpts criu.ReportOptions) []capability.Requirement {
	reqs := kernel.Catalogue()
	reqs = append(reqs, seccomp.Requirements()...)
	reqs = append(reqs, bpf.Requirements()...)
	reqs = append(reqs, criu.RequirementsWith(criuOpts)...)
	return reqs
}
