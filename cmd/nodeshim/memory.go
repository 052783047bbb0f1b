package main

import (
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// shortLived is the annotation of a command whose process collects no
// garbage until its heap reaches shortLivedMemoryLimit (see
// collectGarbageLate).
const shortLived = "nodeshim.io/short-lived"

// shortLivedMemoryLimit is the heap at which a short-lived command starts
// collecting garbage: a report peaks at ~70 MiB of RSS, most of it kernel
// BTF decoded once for the eBPF loads.
const shortLivedMemoryLimit = 256 << 20

// collectGarbageLate turns the garbage collector off, up to
// shortLivedMemoryLimit, when the command args name is annotated
// shortLived and neither GOGC nor GOMEMLIMIT is set. A report lives a
// fraction of a second and frees little it could reuse: collecting during it
// cost ~10% of the first report's CPU (BENCHMARKS.md, "First run of a
// boot"). It is called from main only, so that tests running the commands
// in-process keep their collector.
func collectGarbageLate(root *cobra.Command, args []string) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	c, _, err := root.Find(args)
	if err != nil || c.Annotations[shortLived] == "" {
		return
	}
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(shortLivedMemoryLimit)
}
