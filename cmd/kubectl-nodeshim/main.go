// Command kubectl-nodeshim is the kubectl plugin of nodeshim (`kubectl
// nodeshim ...`, package cluster/kubectl): checkpoints of pods as cluster
// objects. Installed on PATH (as krew installs plugins), kubectl finds it
// by its name.
//
// Exit codes: 0 on success, 1 on failure, 2 on a usage error.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/nodeshim/nodeshim/cluster/kubectl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := kubectl.Run(ctx, os.Args[1:], kubectl.Env{Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		if kubectl.IsUsage(err) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
