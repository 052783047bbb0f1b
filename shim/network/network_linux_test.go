package network

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newNetNS creates a network namespace for the test without moving the
// test's threads into it (netns.New switches the calling thread, so it is
// switched back at once on a locked thread).
func newNetNS(t *testing.T) netns.NsHandle {
	t.Helper()
	testutil.RequireRoot(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		testutil.SkipIfNotSupported(t, err)
	}
	if err := netns.Set(orig); err != nil {
		t.Fatalf("return to the original namespace: %v", err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// waitCond blocks until the condition satisfies ok; go test's -timeout bounds it.
func waitCond(m *Monitor, ok func(condition.Condition) bool) condition.Condition {
	for {
		ch := m.Changed()
		if c := m.Condition(); ok(c) {
			return c
		}
		<-ch
	}
}

func reason(r string) func(condition.Condition) bool {
	return func(c condition.Condition) bool { return c.Reason == r }
}

func TestNetworkReadyInNamespace(t *testing.T) {
	ns := newNetNS(t)
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	root := t.TempDir()

	m := New(Options{Root: root, NetNS: ns, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if c := m.Condition(); c.Status != condition.Unknown || c.Reason != ReasonNotObserved {
		t.Fatalf("before Run: %+v, want Unknown", c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := m.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	defer func() { cancel(); wg.Wait() }()

	// A fresh namespace has only lo, down.
	c := waitCond(m, reason(ReasonNoLinkUp))
	if c.Status != condition.False || c.Severity != condition.SeverityError ||
		!strings.Contains(c.Message, "no default route") || !strings.Contains(c.Message, "no CNI network configuration") {
		t.Errorf("empty namespace: %+v, want every problem listed", c)
	}

	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "nsh0"}, PeerName: "nsh1"}
	if err := h.LinkAdd(veth); err != nil {
		t.Fatalf("add veth pair: %v", err)
	}
	for _, n := range []string{"nsh0", "nsh1"} {
		l, err := h.LinkByName(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	c = waitCond(m, reason(ReasonNoDefaultRoute))
	if strings.Contains(c.Message, "link") {
		t.Errorf("links up, still reported: %+v", c)
	}

	l, err := h.LinkByName("nsh0")
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := netlink.ParseAddr("10.99.0.1/24")
	if err := h.AddrAdd(l, addr); err != nil {
		t.Fatal(err)
	}
	def := &netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.ParseIP("10.99.0.2")}
	if err := h.RouteAdd(def); err != nil {
		t.Fatalf("add default route: %v", err)
	}
	// Only the CNI configuration missing: a node waiting for its network
	// plugin, Info rather than a failure (with a link down it was Error).
	if c := waitCond(m, reason(ReasonNoCNIConfig)); c.Status != condition.False || c.Severity != condition.SeverityInfo {
		t.Errorf("only the CNI configuration missing: %+v, want False with severity Info", c)
	}

	cni := filepath.Join(root, "etc", "cni", "net.d")
	if err := os.MkdirAll(cni, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cni, "notes.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(cni, "10-bridge.conflist")
	if err := os.WriteFile(conf, []byte(`{"cniVersion":"1.0.0","name":"k8s","plugins":[{"type":"bridge"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	c = waitCond(m, func(c condition.Condition) bool { return c.Status == condition.True })
	if c.Reason != ReasonReady || c.Severity != "" || !strings.Contains(c.Message, "10-bridge.conflist") {
		t.Errorf("ready: %+v", c)
	}
	readySince := c.LastTransitionTime

	// An unrelated route does not churn the condition.
	ch := m.Changed()
	other := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: net.ParseIP("10.98.0.0").To4(), Mask: net.CIDRMask(16, 32)}, Gw: net.ParseIP("10.99.0.3")}
	if err := h.RouteAdd(other); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
		t.Errorf("condition changed on an unrelated route: %+v", m.Condition())
	default:
	}
	if got := m.Condition(); got.LastTransitionTime != readySince || got.Status != condition.True {
		t.Errorf("after unrelated route: %+v", got)
	}

	if err := h.RouteDel(def); err != nil {
		t.Fatalf("delete default route: %v", err)
	}
	waitCond(m, reason(ReasonNoDefaultRoute))
	if err := h.RouteAdd(def); err != nil {
		t.Fatal(err)
	}
	waitCond(m, func(c condition.Condition) bool { return c.Status == condition.True })

	if err := os.Remove(conf); err != nil {
		t.Fatal(err)
	}
	waitCond(m, reason(ReasonNoCNIConfig))
	if err := os.WriteFile(conf, []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	waitCond(m, func(c condition.Condition) bool { return c.Status == condition.True })

	// Taking the link down drops its routes too: link is the first reason.
	if err := h.LinkSetDown(l); err != nil {
		t.Fatal(err)
	}
	c = waitCond(m, reason(ReasonNoLinkUp))
	if c.Status != condition.False {
		t.Errorf("link down: %+v", c)
	}
}

func TestRequiredLinks(t *testing.T) {
	ns := newNetNS(t)
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "req0"}, PeerName: "peer0"}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"req0", "peer0"} {
		l, err := h.LinkByName(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name     string
		required []string
		want     string
	}{
		{"one missing", []string{"req0", "eth9"}, "required links not up: eth9"},
		{"all up", []string{"req0"}, "no default route"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := New(Options{Root: t.TempDir(), NetNS: ns, RequiredLinks: tt.required, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); m.Run(ctx) }()
			defer func() { cancel(); wg.Wait() }()
			// The carrier comes up through the kernel's linkwatch, shortly
			// after LinkSetUp: wait for the message rather than read once.
			waitCond(m, func(c condition.Condition) bool { return strings.HasPrefix(c.Message, tt.want) })
		})
	}
}

func TestCNIConfigs(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"10-a.conf", "20-b.conflist", "30-c.json", ".hidden.conf", "readme.md"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := CNIConfigs(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range got {
		names = append(names, filepath.Base(p))
	}
	if strings.Join(names, ",") != "10-a.conf,20-b.conflist,30-c.json" {
		t.Errorf("CNIConfigs = %v", names)
	}
	if got, err := CNIConfigs(filepath.Join(dir, "missing")); err != nil || got != nil {
		t.Errorf("missing dir = %v %v", got, err)
	}
}
