package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodeshim/nodeshim/condition"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// regServer is a plugin's registration server, as a CSI node driver or a
// DRA kubelet plugin runs it.
type regServer struct {
	registerapi.UnimplementedRegistrationServer
	info     *registerapi.PluginInfo
	failures atomic.Int32 // GetInfo calls to fail before answering
	notified atomic.Int32
}

func (s *regServer) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	if s.failures.Add(-1) >= 0 {
		return nil, status.Error(codes.Unavailable, "not ready yet")
	}
	return s.info, nil
}

func (s *regServer) NotifyRegistrationStatus(context.Context, *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	s.notified.Add(1)
	return &registerapi.RegistrationStatusResponse{}, nil
}

type harness struct {
	t       *testing.T
	root    string
	reg     string
	clock   *clocktesting.FakeClock
	w       *Watcher
	servers []*regServer
}

// serve starts a registration server on path. With atomic set it listens
// on a dotfile beside path (ignored by the watcher) and renames the socket
// into place once serving, so the watcher sees a ready server.
func (h *harness) serve(path string, info *registerapi.PluginInfo, failures int32, atomicPlace bool) *regServer {
	h.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		h.t.Fatal(err)
	}
	listenOn := path
	if atomicPlace {
		listenOn = filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	}
	l, err := net.Listen("unix", listenOn)
	if err != nil {
		h.t.Fatal(err)
	}
	srv := &regServer{info: info}
	srv.failures.Store(failures)
	g := grpc.NewServer()
	registerapi.RegisterRegistrationServer(g, srv)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); g.Serve(l) }()
	h.t.Cleanup(func() { g.Stop(); wg.Wait() })
	if atomicPlace {
		if err := os.Rename(listenOn, path); err != nil {
			h.t.Fatal(err)
		}
	}
	h.servers = append(h.servers, srv)
	return srv
}

func newHarness(t *testing.T, expected ...string) *harness {
	root := t.TempDir()
	h := &harness{t: t, root: root, reg: filepath.Join(root, RegistryDir), clock: clocktesting.NewFakeClock(time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC))}
	h.w = New(Options{KubeletRootDir: root, Expected: expected, Clock: h.clock,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return h
}

func (h *harness) run() {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := h.w.Run(ctx); err != nil {
			h.t.Errorf("Run: %v", err)
		}
	}()
	h.t.Cleanup(func() { cancel(); wg.Wait() })
}

// waitFor blocks until cond holds; go test's -timeout bounds it.
func (h *harness) waitFor(cond func() bool) {
	for {
		ch := h.w.Changed()
		if cond() {
			return
		}
		<-ch
	}
}

func (h *harness) available(name string) (Entry, bool) {
	e, err := h.w.lookup(name)
	return e, err == nil && e.Status.Available
}

func csi(name string, versions ...string) *registerapi.PluginInfo {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: name, Endpoint: "/var/lib/kubelet/plugins/" + name + "/csi.sock", SupportedVersions: versions}
}

func TestWatcherRegistry(t *testing.T) {
	h := newHarness(t, "csi.expected.io")
	// Present before the watcher starts, in a subdirectory.
	h.serve(filepath.Join(h.reg, "csi.early.io", "reg.sock"), csi("csi.early.io", "v1.0.0"), 0, false)
	// A regular file and dotfile sockets are never asked.
	if err := os.WriteFile(filepath.Join(h.reg, "notes.sock"), []byte("not a socket"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.serve(filepath.Join(h.reg, ".hidden.sock"), csi("csi.hidden.io", "1.0.0"), 0, false)
	h.serve(filepath.Join(h.reg, ".dotdir", "x.sock"), csi("csi.dotdir.io", "1.0.0"), 0, false)

	h.run()
	h.waitFor(func() bool { _, ok := h.available("csi.early.io"); return ok })
	e, _ := h.w.lookup("csi.early.io")
	if !e.Status.VersionAccepted || e.Spec.Type != TypeCSI || e.Spec.Endpoint != "/var/lib/kubelet/plugins/csi.early.io/csi.sock" ||
		e.Spec.Socket != filepath.Join(h.reg, "csi.early.io", "reg.sock") {
		t.Errorf("early entry = %+v", e)
	}
	if _, err := h.w.lookup("csi.expected.io"); !errors.Is(err, errNotFound) {
		t.Errorf("Lookup of an expected driver = %v, want errNotFound", err)
	}
	c := h.w.Condition("PluginsReady")
	if c.Status != condition.Unknown || c.Message != "csi.expected.io (Unknown): not registered yet" {
		t.Errorf("condition with an expected driver missing = %+v", c)
	}

	// A device plugin speaking only v1: kubelet would reject it. Endpoint
	// left empty: the registration socket stands in.
	h.clock.Step(time.Minute)
	devSock := filepath.Join(h.reg, "dev.sock")
	h.serve(devSock, &registerapi.PluginInfo{Type: registerapi.DevicePlugin, Name: "example.com/gpu", SupportedVersions: []string{"v1"}}, 0, true)
	h.waitFor(func() bool { _, ok := h.available("example.com/gpu"); return ok })
	dev, _ := h.w.lookup("example.com/gpu")
	if dev.Status.VersionAccepted || dev.Spec.Endpoint != devSock || dev.Status.Message == "" {
		t.Errorf("device plugin entry = %+v, want version rejected", dev)
	}

	// The expected CSI driver arrives in a directory created after start.
	h.serve(filepath.Join(h.reg, "late", "deeper", "csi.sock"), csi("csi.expected.io", "1.0.0", "1.1.0"), 0, true)
	h.waitFor(func() bool { _, ok := h.available("csi.expected.io"); return ok })
	c = h.w.Condition("PluginsReady")
	if c.Status != condition.False || c.Severity != condition.SeverityError || c.Reason != "UnsupportedVersion" {
		t.Errorf("condition with a rejected version = %+v", c)
	}

	// Socket removed: Available flips, with the transition time.
	h.clock.Step(time.Minute)
	removedAt := h.clock.Now()
	early := filepath.Join(h.reg, "csi.early.io", "reg.sock")
	if err := os.Remove(early); err != nil {
		t.Fatal(err)
	}
	h.waitFor(func() bool { e, err := h.w.lookup("csi.early.io"); return err == nil && !e.Status.Available })
	e, _ = h.w.lookup("csi.early.io")
	if !e.Status.LastTransitionTime.Equal(removedAt) || e.Spec.Name != "csi.early.io" {
		t.Errorf("removed entry = %+v, want unavailable since %v with its spec kept", e, removedAt)
	}
	if r := e.Ready(); r.Status != condition.False || r.Reason != "SocketGone" {
		t.Errorf("removed entry Ready = %+v", r)
	}

	// Back again.
	h.clock.Step(time.Minute)
	backAt := h.clock.Now()
	h.serve(early, csi("csi.early.io", "1.0.0"), 0, true)
	h.waitFor(func() bool { _, ok := h.available("csi.early.io"); return ok })
	e, _ = h.w.lookup("csi.early.io")
	if !e.Status.LastTransitionTime.Equal(backAt) {
		t.Errorf("re-registered at %v, want %v", e.Status.LastTransitionTime, backAt)
	}

	// A directory removed with its socket.
	if err := os.RemoveAll(filepath.Join(h.reg, "late")); err != nil {
		t.Fatal(err)
	}
	h.waitFor(func() bool { e, err := h.w.lookup("csi.expected.io"); return err == nil && !e.Status.Available })

	for _, name := range []string{"csi.hidden.io", "csi.dotdir.io"} {
		if _, err := h.w.lookup(name); !errors.Is(err, errNotFound) {
			t.Errorf("dotfile driver %s registered: %v", name, err)
		}
	}
	if n := h.w.entries(); n != 3 {
		t.Errorf("%d entries, want 3", n)
	}
	for i, s := range h.servers {
		if s.notified.Load() != 0 {
			t.Errorf("server %d got NotifyRegistrationStatus: nodeshim must only read", i)
		}
	}
}

func TestWatcherRetriesGetInfo(t *testing.T) {
	h := newHarness(t)
	h.run()
	sock := filepath.Join(h.reg, "dra.sock")
	h.serve(sock, &registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: "gpu.example.com", SupportedVersions: []string{"v1.DRAPlugin"}}, 1, true)
	h.waitFor(func() bool { return h.w.Condition("PluginsReady").Status == condition.Unknown })
	if c := h.w.Condition("PluginsReady"); c.Reason != "GetInfoFailed" {
		t.Errorf("condition after a failed GetInfo = %+v", c)
	}
	if _, err := h.w.lookup("gpu.example.com"); !errors.Is(err, errNotFound) {
		t.Errorf("Lookup before retry = %v", err)
	}
	for h.clock.Waiters() == 0 {
		time.Sleep(time.Millisecond) // the retry timer is set by Run's loop
	}
	h.clock.Step(5 * time.Second)
	h.waitFor(func() bool { _, ok := h.available("gpu.example.com"); return ok })
	if c := h.w.Condition("PluginsReady"); c.Status != condition.True {
		t.Errorf("condition after retry = %+v", c)
	}
}

func TestAcceptVersion(t *testing.T) {
	acc := DefaultAcceptedVersions()
	tests := []struct {
		name     string
		typ      string
		versions []string
		want     bool
	}{
		{"csi 1.0.0", TypeCSI, []string{"1.0.0"}, true},
		{"csi v1.0.0", TypeCSI, []string{"v1.0.0"}, true},
		{"csi 0.3.0 only", TypeCSI, []string{"0.3.0"}, false},
		{"csi one of many", TypeCSI, []string{"0.3.0", "1.0.0"}, true},
		{"device v1beta1", TypeDevice, []string{"v1beta1"}, true},
		{"device 1beta1 is not normalised", TypeDevice, []string{"1beta1"}, false},
		{"dra v1", TypeDRA, []string{"v1.DRAPlugin"}, true},
		{"dra alpha", TypeDRA, []string{"v1alpha4.Node"}, false},
		{"unknown type", "FooPlugin", []string{"v1"}, false},
		{"no versions", TypeCSI, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := acceptVersion(acc, tt.typ, tt.versions)
			if got != tt.want || (!got && why == "") {
				t.Errorf("acceptVersion = %v %q, want %v", got, why, tt.want)
			}
		})
	}
}

// errNotFound is what lookup returns for a driver that never registered.
var errNotFound = errors.New("plugin not found")

// lookup returns a copy of the entry of the named driver.
func (w *Watcher) lookup(name string) (Entry, error) {
	r := w.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[name]
	if !ok {
		return Entry{}, fmt.Errorf("%s: %w", name, errNotFound)
	}
	c := *e
	c.Spec.SupportedVersions = slices.Clone(e.Spec.SupportedVersions)
	return c, nil
}

// entries returns how many drivers were seen.
func (w *Watcher) entries() int {
	w.reg.mu.Lock()
	defer w.reg.mu.Unlock()
	return len(w.reg.entries)
}
