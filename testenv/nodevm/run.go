package nodevm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nodeshim/nodeshim/runtimes/restoring"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/vmtest"
)

// Tag is the build tag of the node scenarios' test files.
const Tag = "nodevm"

// ScenarioPackage is the package whose Tag-tagged tests run on the node.
const ScenarioPackage = "./testenv/nodevm/nodetest"

// Config is what one `make vmtest-node` run needs.
type Config struct {
	// Root is the module root; CacheDir the harness's cache
	// (.cache/vmtest/node).
	Root, CacheDir string
	// Go, QEMU and Busybox are the programs used.
	Go, QEMU, Busybox string
	// Mirror and Keyring are the Debian archive and its keyring, for the
	// kernel and debootstrap.
	Mirror, Keyring string
	// Runc, ContainerdDir and Crictl are the host-built runtime binaries.
	Runc, ContainerdDir, Crictl string
	// Containerd24Dir, when set, is containerd v2.4's directory of
	// binaries, which the node carries in Containerd24Bin.
	Containerd24Dir string
	// LDFlags and Tags are nodeshim's build flags.
	LDFlags, Tags string
	// Nodeshim, when set, is a nodeshim binary to use instead of building
	// one from Root.
	Nodeshim string
	// Timeout bounds the guest from QEMU's start to its end.
	Timeout time.Duration
	// MemoryMB and CPUs size the guest.
	MemoryMB, CPUs int
	// DiskMB is the size of the node's disk (sparse).
	DiskMB int
	// Kube, when set, is the control plane the node joins and the kubelet
	// it runs (KubeFiles, NetArgs); without it the node has no network
	// and no kubelet.
	Kube *Kube
	// Tools are more host programs for the node's NodeBin, by name
	// (kubectl, checkpointctl).
	Tools map[string]string
	// CriuRoot, when set, is trixie's CRIU packages unpacked, from which
	// nodeshim's image (BuildNodeshimImage) takes CRIU for the node.
	CriuRoot string
	// Run, when set, is the scenarios' -test.run pattern.
	Run string
	// Bench, when set, runs in place of the scenarios the benchmarks of
	// BenchPackage that match this -test.bench pattern, each
	// BenchTime (-test.benchtime; "3x" when empty), with BenchEnv's
	// KEY=VALUE pairs in their environment and TMPDIR on the node's disk.
	Bench, BenchPackage, BenchTime string
	BenchEnv                       []string
	// Console receives the guest's console; Log the progress.
	Console io.Writer
	Log     *slog.Logger
}

// Result is what one node run ended with.
type Result struct {
	// Results are the scenarios' verdicts.
	Results Results
	// Steps are the host's build and boot steps' durations, in order.
	Steps []Step
	// GuestTimes are the node's boot points in its uptime; HostTimes the
	// same points from QEMU's start.
	GuestTimes, HostTimes Times
	// ArtifactDir holds console.log, scenarios.log and journal.log.
	ArtifactDir string
	// bench is set for a run of benchmarks (Config.Bench), whose verdict
	// is go test's, not the scenarios'.
	bench bool
	// Outcome is the verdict on the guest itself.
	Outcome vmtest.Outcome
}

// Step is one timed step of a run.
type Step struct {
	Name     string
	Duration time.Duration
	// Note says more, e.g. "cached".
	Note string
}

// Run builds the node and its disk, boots it once and collects the
// scenarios' verdicts. The error names every reason the run failed.
func Run(ctx context.Context, cfg Config) (Result, error) {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	res := Result{bench: cfg.Bench != ""}
	step := func(name string, start time.Time, note string) {
		d := time.Since(start)
		res.Steps = append(res.Steps, Step{Name: name, Duration: d, Note: note})
		log.Info("step done", "step", name, "took", d.Round(100*time.Millisecond), "note", note)
	}
	for _, p := range []string{cfg.Runc, filepath.Join(cfg.ContainerdDir, "containerd"), cfg.Crictl, cfg.Busybox} {
		if _, err := os.Stat(p); err != nil {
			return res, fmt.Errorf("the node needs %s: %w", p, err)
		}
	}
	build := filepath.Join(cfg.CacheDir, "build")
	if err := os.RemoveAll(build); err != nil {
		return res, fmt.Errorf("clean %s: %w", build, err)
	}
	if err := os.MkdirAll(build, 0o755); err != nil {
		return res, fmt.Errorf("create %s: %w", build, err)
	}

	start := time.Now()
	if cfg.Containerd24Dir != "" {
		if _, err := os.Stat(filepath.Join(cfg.Containerd24Dir, "containerd")); err != nil {
			return res, fmt.Errorf("the node needs containerd v2.4: %w", err)
		}
	}
	bins := Binaries{Runc: cfg.Runc, ContainerdDir: cfg.ContainerdDir, Containerd24Dir: cfg.Containerd24Dir, Crictl: cfg.Crictl,
		Nodeshim: filepath.Join(build, "nodeshim"), Test: filepath.Join(build, TestBinary), Tools: cfg.Tools}
	var extra []File
	if cfg.Kube != nil {
		if _, err := os.Stat(cfg.Kube.Kubelet); err != nil {
			return res, fmt.Errorf("the node needs kubelet: %w", err)
		}
		bins.Kubelet = cfg.Kube.Kubelet
		extra = KubeFiles(*cfg.Kube)
	}
	if cfg.Nodeshim != "" {
		bins.Nodeshim = cfg.Nodeshim
	} else if _, err := vmtest.ExecRunner(ctx, cfg.Root, "env", "CGO_ENABLED=1", cfg.Go, "build", "-trimpath", "-tags", cfg.Tags,
		"-ldflags", cfg.LDFlags, "-o", bins.Nodeshim, "./cmd/nodeshim"); err != nil {
		return res, fmt.Errorf("build nodeshim: %w", err)
	}
	bins.RuntimeClass = filepath.Join(build, "runtimeclass")
	for _, name := range restoring.Binaries {
		if _, err := vmtest.ExecRunner(ctx, cfg.Root, "env", "CGO_ENABLED=0", cfg.Go, "build", "-trimpath",
			"-o", filepath.Join(bins.RuntimeClass, name), "./cmd/"+name); err != nil {
			return res, fmt.Errorf("build %s: %w", name, err)
		}
	}
	if cfg.Bench != "" {
		if _, err := vmtest.ExecRunner(ctx, cfg.Root, "env", "CGO_ENABLED=1", cfg.Go, "test", "-c", "-trimpath", "-tags", cfg.Tags,
			"-o", bins.Test, cfg.BenchPackage); err != nil {
			return res, fmt.Errorf("build the benchmarks of %s: %w", cfg.BenchPackage, err)
		}
	} else if _, err := vmtest.ExecRunner(ctx, cfg.Root, "env", "CGO_ENABLED=0", cfg.Go, "test", "-c", "-tags", Tag,
		"-o", bins.Test, ScenarioPackage); err != nil {
		return res, fmt.Errorf("build the node scenarios: %w", err)
	}
	if err := os.Mkdir(filepath.Join(build, "images"), 0o755); err != nil {
		return res, fmt.Errorf("create %s: %w", build, err)
	}
	imgs, err := runtimetest.BuildImages(filepath.Join(build, "images"), cfg.Busybox, "gcc")
	if err != nil {
		return res, fmt.Errorf("build the node's test images: %w", err)
	}
	bins.Images = []string{imgs.Busybox, imgs.Pause}
	step("build nodeshim, the scenarios and the test images", start, "")
	if cfg.CriuRoot != "" {
		start = time.Now()
		img, err := BuildNodeshimImage(ctx, vmtest.ExecRunner, cfg.Root, cfg.Go, cfg.CriuRoot, filepath.Join(build, "images"))
		if err != nil {
			return res, err
		}
		bins.Images = append(bins.Images, img)
		step("nodeshim's image", start, "")
	}

	start = time.Now()
	fetch := &vmtest.Fetcher{CacheDir: cfg.CacheDir, Mirror: cfg.Mirror, Keyring: cfg.Keyring, Run: vmtest.ExecRunner, Modules: Modules()}
	kernel, err := fetch.Fetch(ctx, vmtest.Kernels()[KernelLabel])
	if err != nil {
		return res, err
	}
	step("kernel "+kernel.Package, start, "")

	start = time.Now()
	rootfs, made, err := Rootfs(ctx, vmtest.ExecRunner, cfg.CacheDir, cfg.Mirror, cfg.Keyring)
	if err != nil {
		return res, err
	}
	note := "cached"
	if made {
		note = "debootstrap"
	}
	step("root filesystem", start, note)

	start = time.Now()
	stage := filepath.Join(cfg.CacheDir, "stage")
	testTimeout := (cfg.Timeout * 3 / 4).Round(time.Second).String()
	if err := Stage(ctx, vmtest.ExecRunner, rootfs, kernel.Root, stage, bins, runtimetest.PauseImage, testTimeout, extra...); err != nil {
		return res, err
	}
	if cfg.Bench != "" {
		script, err := BenchRunnerScript(testTimeout, cfg.Bench, cfg.BenchTime, cfg.BenchEnv)
		if err != nil {
			return res, err
		}
		if err := writeNodeFile(stage, File{Path: NodeLib + "/run", Mode: 0o755, Data: script}); err != nil {
			return res, err
		}
	} else if cfg.Run != "" {
		if strings.ContainsAny(cfg.Run, "'\"`$\\ ") {
			return res, fmt.Errorf("-run %q: quotes, spaces and shell characters cannot go into the runner", cfg.Run)
		}
		// The runner is regenerated with the pattern.
		if err := writeNodeFile(stage, File{Path: NodeLib + "/run", Mode: 0o755,
			Data: strings.Replace(RunnerScript(testTimeout), "-test.count=1", "-test.count=1 -test.run '"+cfg.Run+"'", 1)}); err != nil {
			return res, err
		}
	}
	disk := filepath.Join(cfg.CacheDir, "node.ext4")
	if err := DiskImage(ctx, vmtest.ExecRunner, stage, disk, cfg.DiskMB); err != nil {
		return res, err
	}
	if err := os.RemoveAll(stage); err != nil {
		return res, fmt.Errorf("clean %s: %w", stage, err)
	}
	initrd := filepath.Join(cfg.CacheDir, "initramfs.cpio.gz")
	if err := Initramfs(ctx, cfg.Busybox, kernel.Root, filepath.Join(cfg.CacheDir, "initramfs"), initrd); err != nil {
		return res, err
	}
	step("disk image and initramfs", start, "")

	start = time.Now()
	err = boot(ctx, cfg, kernel.Vmlinuz, initrd, disk, &res, log)
	step("boot and scenarios", start, "")
	if err != nil {
		return res, err
	}
	return res, res.err()
}

// err is the run's verdict: the guest's, and the scenarios'.
func (r *Result) err() error {
	errs := []error{r.Outcome.Err}
	passed, failed, _ := r.Results.Counts()
	if failed > 0 {
		var names []string
		for _, t := range r.Results.Tests {
			if t.Failed && !strings.Contains(t.Name, "/") {
				names = append(names, t.Name)
			}
		}
		errs = append(errs, fmt.Errorf("%d node scenarios failed: %s", failed, strings.Join(names, " ")))
	}
	switch {
	case passed+failed > 0 || r.Outcome.Err != nil:
	case !r.bench:
		errs = append(errs, errors.New("no node scenario ran"))
	case !BenchPassed(r.Results.Output):
		errs = append(errs, errors.New("no benchmark ran to go test's PASS"))
	}
	return errors.Join(errs...)
}

// terminalEscape matches the VT100 sequences the firmware and systemd
// write to the console.
var terminalEscape = regexp.MustCompile(`\x1b(\[[0-9;?]*[A-Za-z]|[A-Za-z])`)

// boot runs the node once and fills res.
func boot(ctx context.Context, cfg Config, vmlinuz, initrd, disk string, res *Result, log *slog.Logger) error {
	dir := filepath.Join(cfg.CacheDir, "artifacts")
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clean %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	res.ArtifactDir = dir
	consoleLog, err := os.OpenFile(filepath.Join(dir, "console.log"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("create console log: %w", err)
	}
	defer consoleLog.Close()
	serial := filepath.Join(dir, "serial1.log")
	m := &vmtest.Machine{
		QEMU: cfg.QEMU, Kernel: vmlinuz, Initrd: initrd, Label: TestName,
		MemoryMB: cfg.MemoryMB, CPUs: cfg.CPUs, ArtifactFile: serial, Timeout: cfg.Timeout,
		// The disk image is made for this run alone: cache=unsafe spares
		// the host's fsyncs.
		Extra:     []string{"-drive", "file=" + disk + ",format=raw,if=virtio,cache=unsafe"},
		Append:    "rw systemd.show_status=auto net.ifnames=0",
		TCGThread: "single",
	}
	if cfg.Kube != nil {
		m.Extra = append(m.Extra, NetArgs(cfg.Busybox, cfg.Kube.HostPort)...)
	}
	var c vmtest.Console
	var mu sync.Mutex
	res.GuestTimes, res.HostTimes = Times{}, Times{}
	log.Info("booting the node", "kernel", vmlinuz, "disk", disk, "timeout", cfg.Timeout)
	start := time.Now()
	hung, qemuErr, err := m.Boot(ctx, func(line string) {
		mu.Lock()
		defer mu.Unlock()
		text := terminalEscape.ReplaceAllString(strings.TrimRight(line, "\r\n"), "")
		fmt.Fprintln(consoleLog, text)
		if cfg.Console != nil {
			fmt.Fprintln(cfg.Console, "[node] "+text)
		}
		c.Line(text)
		if res.GuestTimes.ParseTime(text) {
			// The host's clock for the same point: the name is the last key set.
			for k := range res.GuestTimes {
				if _, ok := res.HostTimes[k]; !ok {
					res.HostTimes[k] = time.Since(start).Seconds()
				}
			}
		}
	})
	if err != nil {
		return err
	}
	res.Outcome = c.Evaluate([]string{TestName}, hung, qemuErr)
	out, err := os.ReadFile(serial)
	if err != nil {
		res.Outcome.Err = errors.Join(res.Outcome.Err, fmt.Errorf("read the scenarios' output: %w", err))
		return nil
	}
	res.Results = ParseResults(out)
	for name, data := range map[string]string{"scenarios.log": res.Results.Output, "journal.log": res.Results.Journal} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			return fmt.Errorf("keep %s: %w", name, err)
		}
	}
	return nil
}
