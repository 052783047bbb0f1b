package runtimeneeds

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/kernel/seccomp"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// runBundle runs the trivial container once with "RUNTIME run" under the
// given filter and returns the runtime's output and error, which carries
// the container's exit status. (The runs through podman's and
// containerd's create and start are cmd/nodeshim's tests.)
func runBundle(t *testing.T, id Identity, cgroupParent string, filter *specs.LinuxSeccomp, nnp bool) (string, error) {
	t.Helper()
	exe, err := nativeExitBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cid := "nodeshim-needs-test-" + filepath.Base(dir)
	arch, err := seccomp.SCMPArch(runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	spec := trivialSpec(cgroupParent+"/"+cid, arch, nnp)
	spec.Linux.Seccomp = filter
	if err := writeBundle(filepath.Join(dir, "bundle"), exe, spec); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	out, err := exec.Command(id.Path, "--root", state, "run", "--bundle", filepath.Join(dir, "bundle"), cid).CombinedOutput()
	if err != nil {
		exec.Command(id.Path, "--root", state, "delete", "--force", cid).Run()
	}
	return string(out), err
}

// only returns the filter that allows exactly names and denies the rest
// with EPERM, as a recorded profile does.
func only(arch string, names []string) *specs.LinuxSeccomp {
	eperm := uint(1)
	return &specs.LinuxSeccomp{
		DefaultAction:   specs.ActErrno,
		DefaultErrnoRet: &eperm,
		Architectures:   []specs.Arch{specs.Arch(arch)},
		Syscalls:        []specs.LinuxSyscall{{Names: names, Action: specs.ActAllow}},
	}
}

// TestMeasureRealRuntimes measures runc and crun as this node has them
// and proves the measurement both needed and sufficient: a container
// whose filter allows the measured syscalls and exit_group (the exit
// binary's own) starts and exits 0, with and without
// no_new_privileges; without execve, or for runc without fstatfs (its
// check that /proc/self/fd is procfs before closing the fds it does not
// pass on), it does not. What the init does before the filter
// (pivot_root, sethostname, mount) is not in the measurement.
func TestMeasureRealRuntimes(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/sys/kernel/btf/vmlinux")
	p := rt.Podman(t)
	arch, err := seccomp.SCMPArch(runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{runtimetest.RuntimeRunc, runtimetest.RuntimeCrun} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			id, err := Identify(ctx, p.RuntimePath(name))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(id.Version, name) {
				t.Errorf("version %q does not name %s", id.Version, name)
			}
			needs, err := Measure(ctx, id, Options{WorkDir: t.TempDir(), CgroupParent: p.CgroupParent})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d runs, signal handlers %t, %d syscalls: %v", id, needs.Runs, needs.SignalHandlers, len(needs.Syscalls), needs.Syscalls)
			if !slices.Contains(needs.Syscalls, "execve") {
				t.Errorf("no execve in %v", needs.Syscalls)
			}
			for _, before := range []string{"pivot_root", "sethostname", "mount", "seccomp"} {
				if slices.Contains(needs.Syscalls, before) {
					t.Errorf("%s, made before the filter, is in the measurement %v", before, needs.Syscalls)
				}
			}
			if _, err := Decode(mustJSON(t, needs)); err != nil {
				t.Errorf("the measurement does not decode: %v", err)
			}

			enough := append(slices.Clone(needs.Syscalls), "exit_group")
			for _, nnp := range []bool{false, true} {
				if out, err := runBundle(t, id, p.CgroupParent, only(arch, enough), nnp); err != nil {
					t.Errorf("no_new_privileges %t: the measured syscalls do not start the container: %v: %s", nnp, err, out)
				}
			}
			without := map[string]string{"execve": ""}
			if name == runtimetest.RuntimeRunc && slices.Contains(needs.Syscalls, "fstatfs") {
				without["fstatfs"] = "ensure /proc/self/fd is on procfs"
			}
			for drop, msg := range without {
				out, err := runBundle(t, id, p.CgroupParent, only(arch, slices.DeleteFunc(slices.Clone(enough), func(s string) bool { return s == drop })), true)
				if err == nil || !strings.Contains(out, msg) {
					t.Errorf("without %s: %v: %s", drop, err, out)
				}
			}
		})
	}
}

// TestMeasureNoFilterLoad runs a "runtime" that runs the container's
// process without loading any filter: the measurement says so instead of
// returning an empty set.
func TestMeasureNoFilterLoad(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/sys/kernel/btf/vmlinux")
	dir := t.TempDir()
	fake := filepath.Join(dir, "fake-runtime")
	// A shell that ignores the bundle: "create" runs a program,
	// unconfined, and "state" says it stopped.
	script := "#!/bin/sh\ncase \"$3\" in\ncreate) /bin/true ;;\nstate) echo '{\"status\":\"stopped\"}' ;;\nesac\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	id := Identity{Path: fake, Version: "fake 1"}
	_, err := Measure(context.Background(), id, Options{WorkDir: dir})
	if !errors.Is(err, ErrNoFilterLoad) || !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("Measure = %v, want ErrNoFilterLoad", err)
	}
}
