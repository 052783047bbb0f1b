package kernel

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeCalls replays recorded outcomes of the calls probes make.
type fakeCalls struct {
	machine      string
	mountSetattr error
	psi          map[string]error // by trigger
	tmpfs        error
	gen          uint32
	genErr       error
	userns       error
	idmap        error
	run          map[string]runResult // by program name
}

type runResult struct {
	out string
	err error
}

func (f *fakeCalls) Machine() (string, error) {
	if f.machine == "" {
		return "", errors.New("fake uname: no machine")
	}
	return f.machine, nil
}
func (f *fakeCalls) MountSetattr() error { return f.mountSetattr }
func (f *fakeCalls) WritePSITrigger(path, trigger string) error {
	err, ok := f.psi[trigger]
	if !ok {
		return errors.New("fake: unexpected trigger " + trigger)
	}
	return err
}
func (f *fakeCalls) TmpfsFlag(string) error { return f.tmpfs }
func (f *fakeCalls) NetfilterGeneration(context.Context) (uint32, error) {
	return f.gen, f.genErr
}
func (f *fakeCalls) NewUserNamespace() error { return f.userns }
func (f *fakeCalls) IdmapTmpfs() error       { return f.idmap }
func (f *fakeCalls) Run(_ context.Context, name string, _ ...string) (string, error) {
	r, ok := f.run[name]
	if !ok {
		return "", &exec.Error{Name: name, Err: exec.ErrNotFound}
	}
	return r.out, r.err
}

// fakeHosts are the recorded hosts under ../testdata/hosts with the outcomes
// their kernels give to the probes' system calls.
var fakeHosts = map[string]*fakeCalls{
	// Debian 12 on its 6.1 kernel: unified cgroup v2, everything but
	// tmpfs noswap (6.4).
	"debian-6.1": {
		mountSetattr: errnoOf("EBADF"),
		psi:          map[string]error{psiTrigger: nil},
		tmpfs:        errnoOf("EINVAL"),
		gen:          7,
		userns:       nil,
		idmap:        fmt.Errorf("mount_setattr MOUNT_ATTR_IDMAP on tmpfs: %w", errnoOf("EINVAL")),
		run:          map[string]runResult{"nft": {out: "nftables v1.0.6 (Lester Gooch #5)\n"}},
	},
	// RHEL 8's 4.18 kernel: hybrid cgroups, PSI and its triggers backported
	// and switched on with psi=1, no mount_setattr, user namespaces switched off, the
	// distribution's nft 0.9.3.
	"rhel-8.10": {
		mountSetattr: errnoOf("ENOSYS"),
		psi:          map[string]error{psiTrigger: nil},
		tmpfs:        errnoOf("EINVAL"),
		gen:          3,
		userns:       errnoOf("ENOSPC"),
		idmap:        fmt.Errorf("%w: clone CLONE_NEWUSER: %w", errUserNS, errnoOf("ENOSPC")),
		run:          map[string]runResult{"nft": {out: "nftables v0.9.3 (Topsy)\n"}},
	},
}

// testHost returns the Host rooted at testdata/hosts/name with its fake
// calls.
func testHost(t testing.TB, name string) *Host {
	t.Helper()
	calls, ok := fakeHosts[name]
	if !ok {
		t.Fatalf("no fake host %q", name)
	}
	root := filepath.Join("..", "testdata", "hosts", name)
	return &Host{
		ProcRoot:    filepath.Join(root, "proc"),
		SysRoot:     filepath.Join(root, "sys"),
		BootRoot:    filepath.Join(root, "boot"),
		ModulesRoot: filepath.Join(root, "lib", "modules"),
		Calls:       calls,
	}
}

// fixedClock returns a clock stuck at one instant, for deterministic
// reports.
func fixedClock() func() time.Time {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	return func() time.Time { return t0 }
}

func errnoOf(name string) error {
	for e := range 200 {
		if errnoName(syscall.Errno(e)) == name {
			return syscall.Errno(e)
		}
	}
	panic("unknown errno " + name)
}

func mustContain(t *testing.T, got, want string) {
	t.Helper()
	if !strings.Contains(got, want) {
		t.Errorf("got %q, want it to contain %q", got, want)
	}
}
