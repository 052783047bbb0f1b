// Command nodevm boots the test node (trixie 6.12, systemd, containerd 2.x
// with the systemd cgroup driver, runc, nodeshim serve) under QEMU and runs
// the node scenarios in it; `make vmtest-node` runs it. See package
// testenv/nodevm.
//
// It prints each scenario's verdict and time, the node's boot times and
// `N passed, N failed`, and exits 0 when every scenario passed, 1
// otherwise (a failed scenario, none run, a guest that hung or panicked, a
// build or fetch that failed).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/nodeshim/nodeshim/testenv/nodevm"
)

func main() {
	os.Exit(run())
}

func run() int {
	var cfg nodevm.Config
	var quiet bool
	var kubelet string
	var cpBins nodevm.ControlPlaneBinaries
	flag.StringVar(&cfg.Root, "root", ".", "module root")
	flag.StringVar(&cfg.CacheDir, "cache", ".cache/vmtest/node", "cache directory (git-ignored)")
	flag.StringVar(&cfg.Go, "go", "go", "go command")
	flag.StringVar(&cfg.QEMU, "qemu", "qemu-system-x86_64", "QEMU binary")
	flag.StringVar(&cfg.Busybox, "busybox", "/bin/busybox", "statically linked busybox (busybox-static)")
	flag.StringVar(&cfg.Mirror, "mirror", "http://deb.debian.org/debian", "Debian archive")
	flag.StringVar(&cfg.Keyring, "keyring", "/usr/share/keyrings/debian-archive-keyring.gpg", "keyring that signs the archive")
	flag.StringVar(&cfg.Runc, "runc", "", "runc binary for the node")
	flag.StringVar(&cfg.ContainerdDir, "containerd", "", "directory of containerd, containerd-shim-runc-v2 and ctr for the node")
	flag.StringVar(&cfg.Containerd24Dir, "containerd24", "", "directory of containerd v2.4's binaries, which a scenario runs in place of -containerd's")
	flag.StringVar(&cfg.Crictl, "crictl", "", "crictl binary for the node")
	flag.StringVar(&cfg.LDFlags, "ldflags", "", "-ldflags for nodeshim")
	flag.StringVar(&cfg.Tags, "tags", "grpcnotrace", "build tags for nodeshim")
	flag.StringVar(&cfg.Nodeshim, "nodeshim", "", "a nodeshim binary to use instead of building one from -root")
	flag.DurationVar(&cfg.Timeout, "timeout", 25*time.Minute, "time the node has from QEMU's start to power-off before QEMU is killed")
	flag.IntVar(&cfg.MemoryMB, "memory", 3072, "node memory in MiB")
	flag.IntVar(&cfg.CPUs, "cpus", 2, "node CPUs")
	flag.IntVar(&cfg.DiskMB, "disk", 4096, "node disk in MiB (sparse)")
	flag.StringVar(&kubelet, "kubelet", "", "kubelet for the node; with it the harness starts the control plane the node joins")
	flag.StringVar(&cpBins.APIServer, "kube-apiserver", "", "kube-apiserver of the node's control plane (kubelet's version)")
	flag.StringVar(&cpBins.Etcd, "etcd", "", "etcd of the node's control plane")
	flag.StringVar(&cpBins.ControllerManager, "kube-controller-manager", "", "kube-controller-manager of the node's control plane")
	flag.StringVar(&cpBins.Scheduler, "kube-scheduler", "", "kube-scheduler of the node's control plane, which binds the DaemonSet's pod")
	var kubectl, checkpointctl string
	flag.StringVar(&kubectl, "kubectl", "", "kubectl for the node, with which the DaemonSet scenario applies deploy/")
	flag.StringVar(&checkpointctl, "checkpointctl", "", "checkpointctl for the node, which reads the checkpoint scenarios' archives")
	flag.StringVar(&cfg.CriuRoot, "criu-root", "", "trixie's CRIU packages unpacked, from which nodeshim's image for the node takes CRIU (without it no image is built)")
	flag.StringVar(&cfg.Run, "run", "", "run only the scenarios matching this -test.run pattern")
	flag.StringVar(&cfg.Bench, "bench", "", "run, instead of the scenarios, the benchmarks of -bench-pkg matching this -test.bench pattern")
	flag.StringVar(&cfg.BenchPackage, "bench-pkg", "./criu", "the package whose benchmarks -bench runs")
	flag.StringVar(&cfg.BenchTime, "benchtime", "3x", "the benchmarks' -test.benchtime")
	flag.Func("bench-env", "KEY=VALUE for the benchmarks' environment (repeatable)", func(s string) error {
		cfg.BenchEnv = append(cfg.BenchEnv, s)
		return nil
	})
	flag.BoolVar(&quiet, "quiet", false, "do not copy the node's console to stdout (it is kept in the artifacts)")
	flag.Parse()
	cfg.Tools = map[string]string{}
	for name, p := range map[string]string{"kubectl": kubectl, "checkpointctl": checkpointctl} {
		if p != "" {
			cfg.Tools[name] = p
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg.Log = log
	if !quiet {
		cfg.Console = os.Stdout
	}
	for _, p := range []*string{&cfg.Root, &cfg.CacheDir} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			log.Error("bad path", "path", *p, "err", err)
			return 1
		}
		*p = abs
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	start := time.Now()
	if kubelet != "" {
		dir := filepath.Join(cfg.CacheDir, "control-plane")
		if err := os.RemoveAll(dir); err != nil {
			log.Error("clean the control plane's directory", "err", err)
			return 1
		}
		cp, err := nodevm.StartControlPlane(dir, cpBins)
		if err != nil {
			log.Error("start the node's control plane", "err", err)
			return 1
		}
		defer func() {
			if err := cp.Err(); err != nil {
				log.Error("the node's control plane", "err", err, "logs", cp.Logs())
			}
			cp.Stop()
		}()
		log.Info("the node's control plane is up", "apiserver", cp.API.Host(), "dir", dir, "took", time.Since(start).Round(100*time.Millisecond))
		cp.Kube.Kubelet = kubelet
		cfg.Kube = &cp.Kube
	}
	res, err := nodevm.Run(ctx, cfg)
	summary(os.Stdout, res, time.Since(start))
	if cfg.Bench != "" && res.ArtifactDir != "" {
		// The benchmarks' lines, which the scenarios' verdicts do not hold.
		if b, rerr := os.ReadFile(filepath.Join(res.ArtifactDir, "scenarios.log")); rerr == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(line, "Benchmark") || strings.HasPrefix(line, "PASS") || strings.HasPrefix(line, "FAIL") || strings.Contains(line, "--- ") {
					fmt.Println("nodevm:", line)
				}
			}
		}
	}
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(os.Stderr, "nodevm: FAIL:", line)
		}
		return 1
	}
	return 0
}

// summary prints the steps' and scenarios' times, the node's boot times
// and the counts.
func summary(w io.Writer, res nodevm.Result, total time.Duration) {
	for _, s := range res.Steps {
		note := ""
		if s.Note != "" {
			note = " (" + s.Note + ")"
		}
		fmt.Fprintf(w, "nodevm: step %s: %s%s\n", s.Name, s.Duration.Round(100*time.Millisecond), note)
	}
	var names []string
	for k := range res.GuestTimes {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return res.GuestTimes[names[i]] < res.GuestTimes[names[j]] })
	for _, k := range names {
		fmt.Fprintf(w, "nodevm: node %s at %.1fs of its uptime, %.1fs after QEMU started\n", k, res.GuestTimes[k], res.HostTimes[k])
	}
	for _, t := range res.Results.Tests {
		verdict := "PASS"
		switch {
		case t.Unfinished:
			verdict = "FAIL (no verdict: the node stopped in it)"
		case t.Failed:
			verdict = "FAIL"
		case t.Skipped:
			verdict = "SKIP"
		}
		fmt.Fprintf(w, "nodevm: %s %s (%s)\n", verdict, t.Name, t.Duration.Round(10*time.Millisecond))
	}
	if res.ArtifactDir != "" {
		fmt.Fprintf(w, "nodevm: console, scenarios' output and the node's journal in %s\n", res.ArtifactDir)
	}
	passed, failed, skipped := res.Results.Counts()
	fmt.Fprintf(w, "nodevm: total %s\n", total.Round(time.Second))
	fmt.Fprintf(w, "%d passed, %d failed, %d skipped\n", passed, failed, skipped)
}
