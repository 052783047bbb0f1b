package main

import (
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// shortLived is the annotation of a command whose process collects no
// garbage until its heap reaches shortLivedMemoryLimit (see
// tuneGarbageCollector).
const shortLived = "nodeshim.io/short-lived"

// shortLivedMemoryLimit is the heap at which a short-lived command starts
// collecting garbage: a report peaks at ~70 MiB of RSS, most of it kernel
// BTF decoded once for the eBPF loads.
const shortLivedMemoryLimit = 256 << 20

// longLived is the annotation of a command that runs as a long-lived daemon
// (serve): its process collects garbage at longLivedGOGC.
const longLived = "nodeshim.io/long-lived"

// longLivedGOGC is the GOGC of a daemon, as nodeshim-reporter's: an idle
// serve keeps ~1.5 MiB of live heap once settled and allocates little, so
// it collects before its heap doubles, and below the runtime's 4 MiB
// minimum heap that GOGC 100 sets. With 1,000 pod cgroups: idle RSS
// 29.6-29.8 MiB against 30.0-30.1 at GOGC 100, peak 32.8-32.9 against
// 34.5-36.3, idle CPU 0.200-0.225% of a core against 0.200%
// (BENCHMARKS.md, Footprint).
const longLivedGOGC = 25

// tuneGarbageCollector sets the garbage collector for the command args
// name: for a command annotated shortLived, unless GOGC or GOMEMLIMIT is
// set, it turns the collector off up to shortLivedMemoryLimit; for one
// annotated longLived, unless GOGC is set, it sets GOGC to longLivedGOGC
// (the DaemonSet sets GOMEMLIMIT from the container's limit, a ceiling,
// not a pace). A report lives a fraction of a second and frees little it
// could reuse: collecting during it cost ~10% of the first report's CPU
// (BENCHMARKS.md, "First run of a boot"). It is called from main only, so
// that tests running the commands in-process keep their collector.
func tuneGarbageCollector(root *cobra.Command, args []string) {
	c, _, err := root.Find(args)
	if err != nil {
		return
	}
	gogc, limit := os.Getenv("GOGC") != "", os.Getenv("GOMEMLIMIT") != ""
	switch {
	case c.Annotations[shortLived] != "" && !gogc && !limit:
		debug.SetGCPercent(-1)
		debug.SetMemoryLimit(shortLivedMemoryLimit)
	case c.Annotations[longLived] != "" && !gogc:
		debug.SetGCPercent(longLivedGOGC)
	}
}
