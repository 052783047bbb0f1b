// Command vmtest runs nodeshim's guest tests under Debian kernels in QEMU;
// `make vmtest KERNELS="6.1 6.12"` runs it. See package testenv/vmtest.
//
// It exits 0 when every guest passed, with the guests' test exit status when
// a test binary failed, and 1 on any other failure (a kernel that could not be
// fetched, a guest panic, a missing test binary, a hung guest).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nodeshim/nodeshim/testenv/vmtest"
)

func main() {
	os.Exit(run())
}

func run() int {
	var cfg vmtest.Config
	var kernels string
	flag.StringVar(&kernels, "kernels", "6.1", "kernel labels to boot, separated by spaces or commas")
	flag.StringVar(&cfg.Root, "root", ".", "module root")
	flag.StringVar(&cfg.CacheDir, "cache", ".cache/vmtest", "cache directory (git-ignored)")
	flag.StringVar(&cfg.Go, "go", "go", "go command")
	flag.StringVar(&cfg.QEMU, "qemu", "qemu-system-x86_64", "QEMU binary")
	flag.StringVar(&cfg.Busybox, "busybox", "/bin/busybox", "statically linked busybox (busybox-static)")
	flag.StringVar(&cfg.Mirror, "mirror", "http://deb.debian.org/debian", "Debian archive for the private apt sources list")
	flag.StringVar(&cfg.Keyring, "keyring", "/usr/share/keyrings/debian-archive-keyring.gpg", "keyring that signs the archive")
	flag.BoolVar(&cfg.Refresh, "refresh", false, "resolve and download the kernels again")
	flag.DurationVar(&cfg.Timeout, "timeout", 40*time.Minute, "time each guest has from boot to power-off before QEMU is killed")
	flag.IntVar(&cfg.MemoryMB, "memory", 2048, "guest memory in MiB (the initramfs with the host suite's test binaries takes about 400 MiB of it)")
	flag.StringVar(&cfg.LDFlags, "ldflags", "", "-ldflags for the nodeshim binary")
	flag.BoolVar(&cfg.HostSuite, "host-suite", true, "run the ordinary tests of the packages that vmtest.HostSuite selects too, not only the guest tests")
	flag.StringVar(&cfg.Bench, "bench", "", "run the guest benchmarks matching this -test.bench pattern instead of the guest tests")
	flag.StringVar(&cfg.BenchTime, "benchtime", "", "-test.benchtime of the guest benchmarks, e.g. 10x")
	flag.StringVar(&cfg.Fault, "fault", "", "break the guest on purpose to check that the run fails: "+strings.Join(vmtest.Faults(), ", "))
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg.Log = log
	cfg.Console = os.Stdout
	cfg.Kernels = strings.FieldsFunc(kernels, func(r rune) bool { return r == ' ' || r == ',' })
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
	results, err := vmtest.Run(ctx, cfg)
	status := 0
	for _, r := range results {
		verdict := "PASS"
		if r.Outcome.Err != nil {
			verdict = "FAIL"
			if status == 0 {
				status = r.Outcome.ExitStatus
			}
		}
		fmt.Printf("vmtest: kernel %s (%s): %s in %s; console and report in %s\n",
			r.Label, r.Package, verdict, r.Duration.Round(time.Second), r.ArtifactDir)
	}
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(os.Stderr, "vmtest: FAIL:", line)
		}
		if errors.Is(err, vmtest.ErrKernelFetch) {
			fmt.Fprintln(os.Stderr, "vmtest: a kernel could not be fetched: the kernel matrix did not run on it")
		}
		if status == 0 {
			status = 1
		}
	}
	fmt.Printf("vmtest: %s in %s\n", map[bool]string{true: "PASS", false: "FAIL"}[status == 0], time.Since(start).Round(time.Second))
	return status
}
