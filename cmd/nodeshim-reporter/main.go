// Command nodeshim-reporter is nodeshim's reporter as a binary of its own:
// what `nodeshim reporter` does, linked without the shim's code (eBPF,
// CRIU, seccomp, the kernel report) and without client-go's clientset, so
// that the reporter container maps a third of the bytes. The image ships
// it beside nodeshim; deploy/daemonset.yaml's reporter container runs it.
//
//	nodeshim-reporter --socket /var/lib/nodeshim/nodeshim.sock
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/nodeshim/nodeshim/cluster/reporter/command"
)

// Set by the build (-X main.version=... -X main.commit=...).
var (
	version = "devel"
	commit  = "unknown"
)

// Memory defaults when the environment sets none: the reporter's live heap
// is 2-5 MiB (one Node, one Lease, the shim's status, queued Events), so it
// collects early rather than growing to twice its live heap, and the soft
// limit keeps the start-up peak down (BENCHMARKS.md, footprint: peak VmRSS
// 19.6 MiB with these, 20.2-20.6 with GOGC=50 and 24MiB). The DaemonSet sets
// GOMEMLIMIT from the container's memory limit.
const (
	defaultGOGC       = 25
	defaultMemLimitMB = 12
)

// Exit codes, as nodeshim's: 1 failure, 2 usage.
const (
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGOGC)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(defaultMemLimitMB << 20)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

func run(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("nodeshim-reporter", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: nodeshim-reporter [flags]

Publish the status that nodeshim serve publishes on its socket to the Node, as
`+"`nodeshim reporter`"+` does (see its --help): nodeshim's conditions on the Node's
status, a heartbeat Lease, an Event per transition, the status digest and version
annotations. It waits on the shim's long poll (GET /status?after=) and falls back
to reading every --poll-interval. Without --kubeconfig it uses the in-cluster
configuration. GOGC defaults to %d and GOMEMLIMIT to %dMiB when unset.

Flags:
`, defaultGOGC, defaultMemLimitMB)
		fs.PrintDefaults()
	}
	var (
		c           command.Config
		showVersion bool
	)
	c.AddFlags(fs)
	fs.BoolVar(&showVersion, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	if showVersion {
		fmt.Printf("nodeshim-reporter %s (commit %s)\n", version, commit)
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "nodeshim-reporter: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	if err := c.Check(); err != nil {
		fmt.Fprintf(os.Stderr, "nodeshim-reporter: %v\n", err)
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := command.Run(ctx, c, version, log); err != nil {
		log.Error("reporter failed", "err", err)
		return exitFailure
	}
	return 0
}
