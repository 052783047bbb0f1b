// Package network computes nodeshim's NetworkReady condition: at least one
// non-loopback link up (or every required link), a default route, and a CNI
// network configuration present. It is nodeshim's positive-polarity view
// beside kubelet's NetworkUnavailable, kept current by netlink link and
// route subscriptions and an fsnotify watch on the CNI directory rather
// than by polling.
package network

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/fsnotify/fsnotify"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"

	"github.com/nodeshim/nodeshim/condition"
)

// ConditionNetworkReady is the condition type this package maintains.
const ConditionNetworkReady = "NetworkReady"

// Reasons of the NetworkReady condition.
const (
	ReasonReady          = "NetworkReady"
	ReasonNoLinkUp       = "NoLinkUp"
	ReasonNoDefaultRoute = "NoDefaultRoute"
	ReasonNoCNIConfig    = "NoCNIConfig"
	ReasonNetlinkError   = "NetlinkError"
	ReasonNotObserved    = "NotObserved"
)

// DefaultCNIConfDir is where CNI network configurations live.
const DefaultCNIConfDir = "/etc/cni/net.d"

// Options configure a Monitor.
type Options struct {
	// Root is the host's root as seen by nodeshim ("/" unless the host is
	// mounted elsewhere, e.g. /host); CNIConfDir is resolved under it.
	Root string
	// CNIConfDir is the CNI configuration directory; DefaultCNIConfDir when empty.
	CNIConfDir string
	// RequiredLinks, when set, are links that must all be up; otherwise any
	// link other than loopback being up is enough.
	RequiredLinks []string
	// NetNS is the network namespace to observe; the caller's when unset
	// (netns.None()).
	NetNS netns.NsHandle
	// Clock stamps transitions; the real clock when nil.
	Clock clock.Clock
	// Logger receives transitions; slog.Default() when nil.
	Logger *slog.Logger
}

// Monitor keeps the NetworkReady condition.
type Monitor struct {
	opts   Options
	cniDir string
	log    *slog.Logger
	mu     sync.Mutex
	conds  condition.Set
	notify []chan struct{}
}

// New returns a Monitor; its condition is Unknown until Run observes.
func New(opts Options) *Monitor {
	if opts.Root == "" {
		opts.Root = "/"
	}
	if opts.CNIConfDir == "" {
		opts.CNIConfDir = DefaultCNIConfDir
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.NetNS == 0 {
		opts.NetNS = netns.None()
	}
	m := &Monitor{opts: opts, cniDir: filepath.Join(opts.Root, opts.CNIConfDir), log: opts.Logger}
	m.conds.Update(condition.Condition{Type: ConditionNetworkReady, Status: condition.Unknown, Reason: ReasonNotObserved,
		Message: "network not observed yet"}, opts.Clock.Now())
	return m
}

// Condition returns the current NetworkReady condition.
func (m *Monitor) Condition() condition.Condition {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, _ := m.conds.Get(ConditionNetworkReady)
	return c
}

// Changed returns a channel closed at the next change of the condition.
func (m *Monitor) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch := make(chan struct{})
	m.notify = append(m.notify, ch)
	return ch
}

func (m *Monitor) set(c condition.Condition) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conds.Update(c, m.opts.Clock.Now()) {
		m.log.Info("condition", "type", c.Type, "status", c.Status, "reason", c.Reason, "message", c.Message)
		for _, ch := range m.notify {
			close(ch)
		}
		m.notify = nil
	}
}

// Run subscribes to link and route updates in the namespace and watches the
// CNI directory, re-evaluating the condition on every update, until ctx is
// done. A failed subscription leaves the condition Unknown with the reason.
func (m *Monitor) Run(ctx context.Context) error {
	// Only rtnetlink: without a family, the handle also opens XFRM and
	// NETLINK_NETFILTER sockets, which fail with EPROTONOSUPPORT where
	// nfnetlink is a module not loaded yet.
	h, err := netlink.NewHandleAt(m.opts.NetNS, unix.NETLINK_ROUTE)
	if err != nil {
		m.set(unknown(fmt.Errorf("netlink handle: %w", err)))
		return fmt.Errorf("netlink handle: %w", err)
	}
	defer h.Close()

	done := make(chan struct{})
	defer close(done)
	links := make(chan netlink.LinkUpdate, 64)
	routes := make(chan netlink.RouteUpdate, 64)
	subErrs := make(chan error, 2)
	onErr := func(err error) {
		select {
		case subErrs <- err:
		default:
		}
	}
	var ns *netns.NsHandle
	if m.opts.NetNS.IsOpen() {
		ns = &m.opts.NetNS
	}
	if err := netlink.LinkSubscribeWithOptions(links, done, netlink.LinkSubscribeOptions{Namespace: ns, ErrorCallback: onErr}); err != nil {
		m.set(unknown(fmt.Errorf("subscribe to link updates: %w", err)))
		return fmt.Errorf("subscribe to link updates: %w", err)
	}
	if err := netlink.RouteSubscribeWithOptions(routes, done, netlink.RouteSubscribeOptions{Namespace: ns, ErrorCallback: onErr}); err != nil {
		m.set(unknown(fmt.Errorf("subscribe to route updates: %w", err)))
		return fmt.Errorf("subscribe to route updates: %w", err)
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", m.cniDir, err)
	}
	defer fw.Close()
	// The CNI directory and its parents may not exist yet (a CNI plugin's
	// DaemonSet creates them): watch the directory and every ancestor up to
	// the root, again after each event, so that its creation is seen.
	watchCNI := func() {
		for d := m.cniDir; ; d = filepath.Dir(d) {
			_ = fw.Add(d) // fails for a directory that does not exist yet
			if d == m.opts.Root || d == filepath.Dir(d) {
				return
			}
		}
	}
	watchCNI()

	// Subscribed first, then read: an update between the two is not lost.
	m.set(m.evaluate(h))
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-links:
			if !ok {
				m.set(unknown(errors.New("link subscription closed")))
				return fmt.Errorf("link subscription closed")
			}
		case _, ok := <-routes:
			if !ok {
				m.set(unknown(errors.New("route subscription closed")))
				return fmt.Errorf("route subscription closed")
			}
		case <-fw.Events:
			watchCNI()
		case err := <-fw.Errors:
			m.log.Warn("CNI directory watch", "err", err)
		case err := <-subErrs:
			m.set(unknown(err))
			return fmt.Errorf("netlink subscription: %w", err)
		}
		drainUpdates(links, routes)
		m.set(m.evaluate(h))
	}
}

// drainUpdates drops the link and route updates already queued: a change
// comes as a burst of them (a veth pair is several link and route
// messages), and one evaluation after the burst reads the same links and
// routes as one per message would. A closed channel is left for Run's
// select to see.
func drainUpdates(links <-chan netlink.LinkUpdate, routes <-chan netlink.RouteUpdate) {
	for {
		select {
		case _, ok := <-links:
			if !ok {
				return
			}
		case _, ok := <-routes:
			if !ok {
				return
			}
		default:
			return
		}
	}
}

func unknown(err error) condition.Condition {
	return condition.Condition{Type: ConditionNetworkReady, Status: condition.Unknown, Reason: ReasonNetlinkError, Message: err.Error()}
}

// evaluate reads links, routes and the CNI directory once.
func (m *Monitor) evaluate(h *netlink.Handle) condition.Condition {
	var problems []string
	reason := ""
	add := func(r, msg string) {
		if reason == "" {
			reason = r
		}
		problems = append(problems, msg)
	}

	links, err := h.LinkList()
	if err != nil {
		return unknown(fmt.Errorf("list links: %w", err))
	}
	var up []string
	for _, l := range links {
		a := l.Attrs()
		if a.Flags&net.FlagLoopback != 0 || !linkUp(a) {
			continue
		}
		up = append(up, a.Name)
	}
	if len(m.opts.RequiredLinks) > 0 {
		var down []string
		for _, n := range m.opts.RequiredLinks {
			if !slices.Contains(up, n) {
				down = append(down, n)
			}
		}
		if len(down) > 0 {
			add(ReasonNoLinkUp, fmt.Sprintf("required links not up: %s", strings.Join(down, ", ")))
		}
	} else if len(up) == 0 {
		add(ReasonNoLinkUp, "no link other than loopback is up")
	}

	hasDefault, err := defaultRoute(h)
	if err != nil {
		return unknown(err)
	}
	if !hasDefault {
		add(ReasonNoDefaultRoute, "no default route")
	}

	// A missing CNI configuration alone is a node waiting for its network
	// plugin (the cluster's CNI DaemonSet installs it; until then kubelet
	// reports NetworkPluginNotReady): Info, not a failure of the host. No
	// link or no default route is a real failure: Error.
	sev := condition.SeverityError
	if len(problems) == 0 {
		sev = condition.SeverityInfo
	}
	confs, err := CNIConfigs(m.cniDir)
	if err != nil {
		add(ReasonNoCNIConfig, err.Error())
		sev = condition.SeverityError
	} else if len(confs) == 0 {
		add(ReasonNoCNIConfig, fmt.Sprintf("no CNI network configuration in %s yet: waiting for a network plugin to install one", m.cniDir))
	}

	if len(problems) > 0 {
		return condition.Condition{Type: ConditionNetworkReady, Status: condition.False, Severity: sev,
			Reason: reason, Message: strings.Join(problems, "; ")}
	}
	return condition.Condition{Type: ConditionNetworkReady, Status: condition.True, Reason: ReasonReady,
		Message: fmt.Sprintf("links up: %s; default route; CNI config %s", strings.Join(up, ", "), filepath.Base(confs[0]))}
}

// linkUp: administratively up and operationally up, or "unknown" for
// drivers that do not report operstate (RFC 2863; dummy devices, tun).
func linkUp(a *netlink.LinkAttrs) bool {
	if a.Flags&net.FlagUp == 0 {
		return false
	}
	return a.OperState == netlink.OperUp || a.OperState == netlink.OperUnknown
}

// defaultRoute reports whether the main table has an IPv4 or IPv6 default
// route.
func defaultRoute(h *netlink.Handle) (bool, error) {
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := h.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return false, fmt.Errorf("list routes: %w", err)
		}
		for _, r := range rs {
			if r.Dst == nil || (r.Dst.IP.IsUnspecified() && isZeroMask(r.Dst.Mask)) {
				return true, nil
			}
		}
	}
	return false, nil
}

func isZeroMask(m net.IPMask) bool {
	ones, _ := m.Size()
	return ones == 0
}

// CNIConfigs lists the network configurations in dir as libcni does
// (*.conf, *.conflist, *.json; dotfiles skipped), sorted. A missing
// directory holds none.
func CNIConfigs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read CNI directory %s: %w", dir, err)
	}
	var out []string
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") || e.IsDir() {
			continue
		}
		switch filepath.Ext(n) {
		case ".conf", ".conflist", ".json":
			out = append(out, filepath.Join(dir, n))
		}
	}
	return out, nil
}
