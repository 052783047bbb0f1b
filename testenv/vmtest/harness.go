package vmtest

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Config is what one `make vmtest` run needs.
type Config struct {
	// Root is the module root.
	Root string
	// CacheDir is the harness's git-ignored cache, e.g. .cache/vmtest.
	CacheDir string
	// Kernels lists the kernel labels to boot, in order.
	Kernels []string
	// Go, QEMU and Busybox are the programs used.
	Go, QEMU, Busybox string
	// Mirror and Keyring configure the private apt sources list.
	Mirror, Keyring string
	// Refresh resolves and downloads the kernels again.
	Refresh bool
	// Timeout bounds each guest from boot to power-off.
	Timeout time.Duration
	// MemoryMB is each guest's memory.
	MemoryMB int
	// LDFlags is passed to the build of the nodeshim binary.
	LDFlags string
	// Console receives every guest's console, each line prefixed with its label.
	Console io.Writer
	// Log receives progress.
	Log *slog.Logger
	// Fault breaks the image on purpose (see Faults); empty for a real run.
	Fault string
	// HostSuite runs, besides the guest tests, the ordinary tests of the
	// packages that HostSuite() selects. It does nothing with Bench.
	HostSuite bool
	// Bench, when not empty, runs the guest benchmarks it matches instead
	// of the guest tests, each BenchTime when set (see Image).
	Bench, BenchTime string
	// After returns a channel that fires after d (the guest timeout);
	// time.After when nil.
	After func(d time.Duration) <-chan time.Time
}

// Result is what one kernel's run ended with.
type Result struct {
	// Label and Package name the kernel.
	Label, Package string
	// Outcome is the verdict on the guest.
	Outcome Outcome
	// ArtifactDir holds console.log and the guest's files (report.json).
	ArtifactDir string
	// Duration is the guest's run from QEMU's start to its end.
	Duration time.Duration
}

// Run builds the guest image once and boots it under each kernel. It returns
// one Result per kernel it could boot, and an error naming every kernel that
// failed, including those that could not be fetched.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if len(cfg.Kernels) == 0 {
		return nil, errors.New("no kernels given (KERNELS=\"6.1 6.12\")")
	}
	kernels := make([]Kernel, 0, len(cfg.Kernels))
	for _, l := range cfg.Kernels {
		k, err := LookupKernel(l)
		if err != nil {
			return nil, err
		}
		kernels = append(kernels, k)
	}
	initrd, expected, err := buildImage(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	fetch := &Fetcher{CacheDir: cfg.CacheDir, Mirror: cfg.Mirror, Keyring: cfg.Keyring, Run: ExecRunner, Refresh: cfg.Refresh}
	var results []Result
	var errs []error
	for _, k := range kernels {
		log.Info("fetching kernel", "kernel", k.Label, "suite", k.Suite)
		img, err := fetch.Fetch(ctx, k)
		if err != nil {
			errs = append(errs, err)
			log.Error("kernel not fetched", "kernel", k.Label, "err", err)
			continue
		}
		pkg := img.Package
		kernelInitrd, err := withKernelFiles(ctx, cfg, img, initrd)
		if err != nil {
			errs = append(errs, fmt.Errorf("kernel %s: %w", k.Label, err))
			continue
		}
		r, err := boot(ctx, cfg, k, pkg, img.Vmlinuz, kernelInitrd, expected, log)
		if err != nil {
			errs = append(errs, fmt.Errorf("kernel %s: %w", k.Label, err))
			continue
		}
		results = append(results, r)
		if r.Outcome.Err != nil {
			errs = append(errs, fmt.Errorf("kernel %s (%s): %w", k.Label, pkg, r.Outcome.Err))
		}
	}
	return results, errors.Join(errs...)
}

// buildImage builds the test binaries and nodeshim and packs the initramfs.
func buildImage(ctx context.Context, cfg Config, log *slog.Logger) (initrd string, expected []string, err error) {
	// The host suite's list is checked against the module on every run,
	// so that a package nobody decided on fails `make vmtest` too.
	pkgs, err := Discover(ctx, ExecRunner, cfg.Go, cfg.Root, HostSuite())
	if err != nil {
		return "", nil, err
	}
	hostSuite := cfg.HostSuite && cfg.Bench == ""
	if !hostSuite {
		pkgs = guestTestsOnly(pkgs)
	}
	if len(pkgs) == 0 {
		return "", nil, fmt.Errorf("no package under %s has %s files with //go:build %s", cfg.Root, FileSuffix, Tag)
	}
	outDir := filepath.Join(cfg.CacheDir, "build")
	if err := os.RemoveAll(outDir); err != nil {
		return "", nil, fmt.Errorf("clean %s: %w", outDir, err)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", nil, fmt.Errorf("create %s: %w", outDir, err)
	}
	b := &Builder{Go: cfg.Go, Root: cfg.Root, OutDir: outDir, Run: ExecRunner}
	if cfg.Fault != "" && !contains(Faults(), cfg.Fault) {
		return "", nil, fmt.Errorf("unknown fault %q (known: %s)", cfg.Fault, strings.Join(Faults(), " "))
	}
	if strings.Contains(cfg.Bench+cfg.BenchTime, "'") {
		return "", nil, fmt.Errorf("bench %q, benchtime %q: a quote cannot go into the guest's init script", cfg.Bench, cfg.BenchTime)
	}
	im := &Image{Busybox: cfg.Busybox, TestTimeout: cfg.Timeout * 4 / 5, Fault: cfg.Fault, Bench: cfg.Bench, BenchTime: cfg.BenchTime}
	for _, p := range GuestLacks() {
		im.Lacks = append(im.Lacks, p.Name)
	}
	if hostSuite {
		if im.Testdata, err = ModuleTestdata(cfg.Root); err != nil {
			return "", nil, err
		}
	}
	for i := range pkgs {
		p := &pkgs[i]
		log.Info("building test binary", "package", p.ImportPath, "tests", strings.Join(p.Tests, " "), "host_suite", p.HostSuite)
		bin, err := b.TestBinary(ctx, p)
		if err != nil {
			return "", nil, err
		}
		im.Tests = append(im.Tests, TestEntry{Package: *p, Binary: bin})
		expected = append(expected, p.Name)
	}
	if hostSuite {
		for _, p := range GuestPrograms() {
			path, err := exec.LookPath(p.Name)
			if err != nil {
				return "", nil, fmt.Errorf("the guests run %s for %s: %w", p.Name, p.Why, err)
			}
			bin, err := b.withLibs(ctx, path)
			if err != nil {
				return "", nil, err
			}
			im.Programs = append(im.Programs, bin)
		}
	}
	log.Info("building nodeshim")
	ns, err := b.Program(ctx, "./cmd/nodeshim", "nodeshim", cfg.LDFlags)
	if err != nil {
		return "", nil, err
	}
	im.Nodeshim = &ns
	stage := filepath.Join(cfg.CacheDir, "initramfs")
	if err := os.RemoveAll(stage); err != nil {
		return "", nil, fmt.Errorf("clean %s: %w", stage, err)
	}
	if err := im.Stage(stage); err != nil {
		return "", nil, err
	}
	initrd = filepath.Join(cfg.CacheDir, "initramfs.cpio.gz")
	if err := Pack(ctx, stage, initrd); err != nil {
		return "", nil, err
	}
	return initrd, expected, nil
}

// guestTestsOnly drops the host suites from pkgs: the packages without
// guest tests go, the others run only their guest tests.
func guestTestsOnly(pkgs []Package) []Package {
	var out []Package
	for _, p := range pkgs {
		if len(p.Tests) == 0 {
			continue
		}
		p.HostSuite = false
		out = append(out, p)
	}
	return out
}

// withKernelFiles returns an initramfs for one kernel: the shared one with a
// second archive of the kernel's own files appended. The kernel unpacks
// concatenated cpio archives in order
// (Documentation/driver-api/early-userspace/buffer-format.rst).
func withKernelFiles(ctx context.Context, cfg Config, img KernelImage, initrd string) (string, error) {
	extra := filepath.Join(cfg.CacheDir, "initramfs-"+img.Package+".cpio.gz")
	if err := Pack(ctx, img.Root, extra); err != nil {
		return "", err
	}
	shared, err := os.ReadFile(initrd)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", initrd, err)
	}
	own, err := os.ReadFile(extra)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", extra, err)
	}
	out := filepath.Join(cfg.CacheDir, "initramfs-"+img.Package+".full.cpio.gz")
	if err := writeFileAtomic(out, append(shared, own...), 0o644); err != nil {
		return "", err
	}
	return out, nil
}

// boot runs the image under one kernel and keeps its console and files.
func boot(ctx context.Context, cfg Config, k Kernel, pkg, vmlinuz, initrd string, expected []string, log *slog.Logger) (Result, error) {
	dir := filepath.Join(cfg.CacheDir, "artifacts", k.Label)
	if err := os.RemoveAll(dir); err != nil {
		return Result{}, fmt.Errorf("clean %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Result{}, fmt.Errorf("create %s: %w", dir, err)
	}
	consoleLog, err := os.OpenFile(filepath.Join(dir, "console.log"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return Result{}, fmt.Errorf("create console log: %w", err)
	}
	defer consoleLog.Close()
	serial := filepath.Join(dir, "serial1.tar")
	m := &Machine{QEMU: cfg.QEMU, Kernel: vmlinuz, Initrd: initrd, Label: k.Label, MemoryMB: cfg.MemoryMB, ArtifactFile: serial, Timeout: cfg.Timeout, After: cfg.After}
	var c Console
	var mu sync.Mutex
	prefix := "[" + k.Label + "] "
	log.Info("booting", "kernel", k.Label, "package", pkg, "timeout", cfg.Timeout)
	start := time.Now()
	hung, qemuErr, err := m.Boot(ctx, func(line string) {
		mu.Lock()
		defer mu.Unlock()
		text := terminalEscape.ReplaceAllString(strings.TrimRight(line, "\r\n"), "")
		fmt.Fprintln(consoleLog, text)
		if cfg.Console != nil {
			fmt.Fprintln(cfg.Console, prefix+text)
		}
		c.Line(text)
	})
	if err != nil {
		return Result{}, err
	}
	r := Result{Label: k.Label, Package: pkg, ArtifactDir: dir, Duration: time.Since(start)}
	r.Outcome = c.Evaluate(expected, hung, qemuErr)
	if hung {
		r.Outcome.Err = fmt.Errorf("%w (after %s)", r.Outcome.Err, cfg.Timeout)
	}
	if c.Done {
		if err := extractArtifacts(serial, dir); err != nil {
			r.Outcome = failOutcome(r.Outcome, err)
		} else if err := checkReport(dir, &c); err != nil {
			r.Outcome = failOutcome(r.Outcome, err)
		}
	}
	return r, nil
}

func failOutcome(o Outcome, err error) Outcome {
	o.Err = errors.Join(o.Err, err)
	if o.ExitStatus == 0 {
		o.ExitStatus = 1
	}
	return o
}

// terminalEscape matches the VT100 sequences that the firmware writes to the
// console (reset, clear screen, line wrap off).
var terminalEscape = regexp.MustCompile(`\x1b(\[[0-9;?]*[A-Za-z]|[A-Za-z])`)

// checkReport checks that a report the guest produced is JSON.
func checkReport(dir string, c *Console) error {
	if _, ok := c.ReportStatus(); !ok {
		return nil
	}
	p := filepath.Join(dir, "report.json")
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("%w: nodeshim report ran but left no artifact: %w", ErrGuestIncomplete, err)
	}
	if !json.Valid(b) {
		return fmt.Errorf("%w: %s is not JSON", ErrTestsFailed, p)
	}
	return nil
}

// extractArtifacts unpacks the regular files of the tar stream the guest
// sent on its second serial port into dir.
func extractArtifacts(tarPath, dir string) error {
	f, err := os.Open(tarPath)
	if err != nil {
		return fmt.Errorf("%w: guest artifacts: %w", ErrGuestIncomplete, err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: read guest artifacts %s: %w", ErrGuestIncomplete, tarPath, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		name := filepath.Base(filepath.Clean("/" + h.Name))
		if name == "console.log" || name == "serial1.tar" || name == "/" {
			continue
		}
		out, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("keep guest artifact %s: %w", name, err)
		}
		_, err = io.Copy(out, io.LimitReader(tr, 64<<20))
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("keep guest artifact %s: %w", name, err)
		}
	}
}
