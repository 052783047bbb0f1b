package main

import (
	"github.com/nodeshim/nodeshim/bpf"
	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/kernel/seccomp"
)

// requirements is the full requirement catalogue of `nodeshim report`:
// the kernel package's own entries followed by those of the facility
// packages, each of which keeps its probes next to the code that needs them.
func requirements() []kernel.Requirement {
	return catalogue(criu.ReportOptions{})
}

// catalogue is requirements with the options of the CRIU entries (the
// cache of `criu check` results).
func catalogue(criuOpts criu.ReportOptions) []kernel.Requirement {
	reqs := kernel.Catalogue()
	reqs = append(reqs, seccomp.Requirements()...)
	reqs = append(reqs, bpf.Requirements()...)
	reqs = append(reqs, criu.RequirementsWith(criuOpts)...)
	return reqs
}
