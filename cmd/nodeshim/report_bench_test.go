package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/report"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// BenchmarkReport measures the full report on this machine's kernel.
//
//   - warm/*: in one process, a fresh Host each time (identity, config and
//     mount table are read again), with the default worker count beside
//     one worker and one goroutine per probe (slow probes always get their
//     own goroutine);
//   - process/*: a first run of a new nodeshim process each time (`report
//     -o json` to /dev/null), beside `nodeshim version`, the floor of
//     starting the binary at all; cpu-ms/op is the user+system time of the
//     process (children included), collect-ms/op the report's own
//     elapsedMicroseconds (collection only, without process start-up);
//     */run=fresh-tmpfs runs the process as at boot on a systemd host, in
//     a mount namespace of its own with an empty tmpfs on /run (criu
//     keeps its kernel facts there); with NODESHIM_REPORT_BASELINE set to
//     another nodeshim binary, the same cases run with it too, as
//     baseline/process/*.
func BenchmarkReport(b *testing.B) {
	testutil.RequireRoot(b)
	reqs := report.Catalogue()
	for _, bc := range []struct {
		name    string
		workers int
	}{
		{"workers=1", 1},
		{fmt.Sprintf("workers=%d", capability.DefaultWorkers), capability.DefaultWorkers},
		{"goroutine-per-probe", len(reqs)},
	} {
		b.Run("warm/"+bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := (capability.Collector{Workers: bc.workers}).Collect(b.Context(), kernel.DefaultHost(), reqs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}

	built := filepath.Join(b.TempDir(), "nodeshim")
	// With the Dockerfile's grpcnotrace, which changes the binary's size
	// (Go start-up maps less of it), and run from a copy written as an
	// image is unpacked, not from the linker's output.
	if out, err := exec.Command("go", "build", "-trimpath", "-tags", "grpcnotrace", "-o", built, ".").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	bin := testutil.InstallAsImage(b, built, filepath.Join(b.TempDir(), "image"))
	// The per-boot cache (criu check, eBPF program loads, PSI triggers):
	// warm is primed once and then read by every run, as by the second
	// report of a boot; criu-only keeps only the criu check answers (the
	// second run before the eBPF verdicts were cached); first gets an
	// empty directory each run, as the first report of a boot does (with
	// the page cache warm); none probes everything live (--cache-dir "").
	// NODESHIM_REPORT_BASELINE names another nodeshim binary (an older
	// build) to run the same cases with, side by side, as baseline/*.
	bins := []struct{ prefix, path string }{{"", bin}}
	if base := os.Getenv("NODESHIM_REPORT_BASELINE"); base != "" {
		bins = append(bins, struct{ prefix, path string }{"baseline/", testutil.InstallAsImage(b, base, filepath.Join(b.TempDir(), "image-base"))})
	}
	for _, bb := range bins {
		benchmarkReportProcess(b, bb.prefix, bb.path)
	}
}

// benchmarkReportProcess runs the process/* cases of BenchmarkReport with
// the binary bin, their names prefixed with prefix.
func benchmarkReportProcess(b *testing.B, prefix, bin string) {
	warm, criuOnly, firsts := b.TempDir(), b.TempDir(), b.TempDir()
	for _, d := range []string{warm, criuOnly} {
		if out, err := exec.Command(bin, "report", "-o", "json", "--cache-dir", d).CombinedOutput(); err != nil {
			b.Fatalf("prime the cache: %v\n%s", err, out)
		}
	}
	type benchCase struct {
		name string
		args func() []string
		// freshRun runs the process in a mount namespace of its own with
		// an empty tmpfs on /run, as /run is at boot on a systemd host:
		// criu keeps its kernel facts there (criu.kdat) for the criu runs
		// after it, and this VM's /run is not a tmpfs.
		freshRun bool
	}
	first := func() []string {
		d, err := os.MkdirTemp(firsts, "first")
		if err != nil {
			b.Fatal(err)
		}
		return []string{"report", "-o", "json", "--cache-dir", d}
	}
	cases := []benchCase{
		{"version", func() []string { return []string{"version"} }, false},
		{"report/cache=warm", func() []string { return []string{"report", "-o", "json", "--cache-dir", warm} }, false},
		{"report/cache=criu-only", func() []string {
			// What a second run paid before the eBPF verdicts were kept:
			// criu check cached, every other probe live.
			if err := os.Remove(filepath.Join(criuOnly, capability.BootCacheFile)); err != nil && !os.IsNotExist(err) {
				b.Fatal(err)
			}
			return []string{"report", "-o", "json", "--cache-dir", criuOnly}
		}, false},
		{"report/cache=first", first, false},
		{"report/cache=none", func() []string { return []string{"report", "-o", "json", "--cache-dir", ""} }, false},
	}
	if _, err := exec.LookPath("unshare"); err == nil {
		cases = append(cases,
			benchCase{"version/run=fresh-tmpfs", func() []string { return []string{"version"} }, true},
			benchCase{"report/cache=first/run=fresh-tmpfs", first, true})
	}
	for _, bc := range cases {
		b.Run(prefix+"process/"+bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var worst, cpu, collect time.Duration
			n := 0
			for b.Loop() {
				var out bytes.Buffer
				args := bc.args()
				cmd := exec.Command(bin, args...)
				if bc.freshRun {
					cmd = exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", `mount -t tmpfs tmpfs /run && exec "$0" "$@"`, bin}, args...)...)
				}
				cmd.Stdout, cmd.Stderr = &out, os.Stderr
				t0 := time.Now()
				if err := cmd.Run(); err != nil {
					b.Fatal(err)
				}
				worst = max(worst, time.Since(t0))
				if args[0] == "report" {
					var r capability.Report
					if err := json.Unmarshal(out.Bytes(), &r); err != nil {
						b.Fatal(err)
					}
					collect += time.Duration(r.ElapsedMicroseconds) * time.Microsecond
				}
				// CPU time of the child and its children (nft, the userns
				// probe's child): what the report costs the node, apart
				// from waiting for a core on a busy machine.
				cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
				n++
			}
			b.ReportMetric(float64(worst.Microseconds())/1000, "worst-ms")
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(n), "cpu-ms/op")
			if collect > 0 {
				// The report's own elapsedMicroseconds: collection in a
				// process that has never collected before.
				b.ReportMetric(float64(collect.Microseconds())/1000/float64(n), "collect-ms/op")
			}
		})
	}
}
