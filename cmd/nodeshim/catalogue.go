package main

import "github.com/nodeshim/nodeshim/kernel"

// requirements is the full requirement catalogue of `nodeshim report`:
// the kernel package's own entries followed by those of the facility
// packages.
func requirements() []kernel.Requirement {
	return kernel.Catalogue()
}
