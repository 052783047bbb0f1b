package restore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/runtimes/restoring"
)

// maxSpecSize bounds the bundle's config.json as it is read.
const maxSpecSize = 16 << 20

// Main is the restoring binary (cmd/nodeshim-runc-restore): the front
// execs it, with the shim's create command line, for a bundle whose
// config.json mentions restoring.AnnotationCheckpoint. A pod's sandbox,
// or a spec without the annotation after all, goes to the runtime by
// exec(2); any other container is restored (Restore.Run) or refused, the
// reason in the runtime's log and on stderr, exit code 1. A lazy
// container's memory is fetched by a `criu lazy-pages` daemon that a copy
// of this binary supervises (started with a hidden first argument,
// superviseArg): the supervisor outlives the create, which returns once
// the container runs, and ends when the memory is here. exe is the
// binary's path, which names the config (restoring.Load).
func Main(exe string, args []string) int {
	if len(args) == 2 && args[0] == superviseArg {
		return superviseLazyPages(args[1])
	}
	cfg, rt, err := restoring.Load(exe)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodeshim-runc:", err)
		return 1
	}
	call, err := restoring.ParseCall(args)
	if err != nil && call.Command == "create" {
		// The front hands over an unreadable create only when its bundle
		// names a checkpoint.
		restoring.Fail(os.Stderr, call, fmt.Errorf("%w: a create that names a checkpoint: %w", ErrUnsupported, err))
		return 1
	}
	if err != nil || call.Command != "create" {
		return execRuntime(rt, args)
	}
	bundle := call.Bundle
	if bundle == "" {
		bundle = "."
	}
	cfgPath := filepath.Join(bundle, "config.json")
	f, err := os.Open(cfgPath)
	if err != nil {
		return execRuntime(rt, args)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSpecSize+1))
	f.Close()
	if err != nil || len(b) > maxSpecSize {
		restoring.Fail(os.Stderr, call, fmt.Errorf("%w: read %s: at most %d bytes: %v", ErrUnsupported, cfgPath, maxSpecSize, err))
		return 1
	}
	var spec specs.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		restoring.Fail(os.Stderr, call, fmt.Errorf("%w: decode %s: %w", ErrUnsupported, cfgPath, err))
		return 1
	}
	ckpt, ok := spec.Annotations[restoring.AnnotationCheckpoint]
	if !ok || spec.Annotations[annotationContainerType] == containerTypeSandbox {
		return execRuntime(rt, args)
	}
	if spec.Root == nil {
		restoring.Fail(os.Stderr, call, fmt.Errorf("%w: %s has no root", ErrUnsupported, cfgPath))
		return 1
	}
	// `criu --version` takes a process start, once per CRIU binary: it
	// runs while the archive is validated and unpacked.
	version := make(chan string, 1)
	go func() { version <- CachedCriuVersion(cfg.Criu, cfg.WorkDir) }()
	r := &Restore{
		Config: cfg, Runtime: rt, Call: call, Spec: &spec, Checkpoint: ckpt,
		Arch: ArchOfGOARCH(runtime.GOARCH), CriuVersion: sync.OnceValue(func() string { return <-version }),
		Readiness: func(run bool) (criu.Readiness, error) { return NodeReadiness(cfg, run) },
		Stdin:     os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
	}
	tm, err := r.Run()
	// A refusal can come before the version is asked: the probe is
	// waited for, so that exiting never cuts its cache's write short
	// (a temporary file left in the work directory).
	r.CriuVersion()
	if errors.Is(err, ErrFinishedInit) {
		restoring.Log(call, "info", fmt.Sprintf("nodeshim-runc: %s: %v", call.ID, err))
		return execRuntime(rt, args)
	}
	if err != nil {
		restoring.Fail(os.Stderr, call, fmt.Errorf("restore %s from %s: %w", call.ID, ckpt, err))
		return 1
	}
	restoring.Log(call, "info", fmt.Sprintf("nodeshim-runc: restored %s from %s (validate %s, unpack %s, rootfs %s, %s restore %s)",
		call.ID, ckpt, tm.Validate.Round(time.Millisecond), tm.Unpack.Round(time.Millisecond), tm.Rootfs.Round(time.Millisecond),
		filepath.Base(rt), tm.Runtime.Round(time.Millisecond)))
	return 0
}

func execRuntime(rt string, args []string) int {
	err := syscall.Exec(rt, append([]string{rt}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "nodeshim-runc: exec %s: %v\n", rt, err)
	return 1
}
