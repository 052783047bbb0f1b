// Package plugin watches kubelet's plugin registry (<kubelet root-dir>/
// plugins_registry) and keeps a CSINodeInfo-style entry per registered
// driver: a spec fixed at registration (name, type, endpoint, versions) and
// a status whose Available flips with the registration socket's presence.
//
// nodeshim only observes: it calls the registration GetInfo on each new
// socket and never NotifyRegistrationStatus, which belongs to kubelet.
package plugin

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodeshim/nodeshim/condition"
)

// Plugin types, as reported by GetInfo.
const (
	TypeCSI    = registerapi.CSIPlugin
	TypeDevice = registerapi.DevicePlugin
	TypeDRA    = registerapi.DRAPlugin
)

// DefaultAcceptedVersions are the registration versions kubelet accepts
// per plugin type: CSI registration 1.0.0, device plugins v1beta1, DRA
// plugins the v1 and v1beta1 gRPC services.
func DefaultAcceptedVersions() map[string][]string {
	return map[string][]string{
		TypeCSI:    {"1.0.0"},
		TypeDevice: {"v1beta1"},
		TypeDRA:    {"v1.DRAPlugin", "v1beta1.DRAPlugin"},
	}
}

// Spec is what a driver said at registration.
type Spec struct {
	// Name is the driver's name, e.g. csi.example.com.
	Name string `json:"name"`
	// Type is CSIPlugin, DevicePlugin or DRAPlugin.
	Type string `json:"type"`
	// Endpoint is where the driver serves; the registration socket when
	// the driver left it empty.
	Endpoint string `json:"endpoint"`
	// SupportedVersions are the versions the driver speaks.
	SupportedVersions []string `json:"supportedVersions"`
	// Socket is the registration socket the driver was found on.
	Socket string `json:"socket"`
}

// Status is the observed state of a driver.
type Status struct {
	// Available is true while the registration socket exists.
	Available bool `json:"available"`
	// LastTransitionTime is when Available last changed.
	LastTransitionTime time.Time `json:"lastTransitionTime"`
	// VersionAccepted is false when kubelet would reject every version the
	// driver supports.
	VersionAccepted bool `json:"versionAccepted"`
	// Message explains a rejected version.
	Message string `json:"message,omitempty"`
}

// Entry is one driver.
type Entry struct {
	Spec   Spec   `json:"spec"`
	Status Status `json:"status"`
}

// Ready returns the entry's Ready condition: True when available with an
// accepted version, False with Error for a version kubelet would not
// accept, False with Warning when the socket is gone.
func (e Entry) Ready() condition.Condition {
	c := condition.Condition{Type: condition.TypeReady}
	switch {
	case !e.Status.VersionAccepted:
		c.Status, c.Severity, c.Reason, c.Message = condition.False, condition.SeverityError, "UnsupportedVersion", e.Status.Message
	case !e.Status.Available:
		c.Status, c.Severity, c.Reason = condition.False, condition.SeverityWarning, "SocketGone"
		c.Message = fmt.Sprintf("registration socket %s removed", e.Spec.Socket)
	default:
		c.Status, c.Reason = condition.True, "Registered"
	}
	return c
}

// acceptVersion reports whether kubelet would accept one of versions for
// plugin type typ. A leading "v" is ignored for CSI, whose versions are
// semantic versions.
func acceptVersion(accepted map[string][]string, typ string, versions []string) (bool, string) {
	ok, known := accepted[typ]
	if !known {
		return false, fmt.Sprintf("plugin type %q is not one kubelet registers", typ)
	}
	norm := func(v string) string {
		if typ == TypeCSI {
			return strings.TrimPrefix(v, "v")
		}
		return v
	}
	for _, v := range versions {
		if slices.ContainsFunc(ok, func(a string) bool { return norm(a) == norm(v) }) {
			return true, ""
		}
	}
	return false, fmt.Sprintf("%s supports %v, kubelet accepts %v", typ, versions, ok)
}

// registry is the state shared by the watcher and readers.
type registry struct {
	mu       sync.Mutex
	entries  map[string]*Entry // by driver name
	sockets  map[string]string // socket path -> driver name
	pending  map[string]string // socket path -> why GetInfo failed
	expected []string
	notify   []chan struct{}
}

func newRegistry(expected []string) *registry {
	return &registry{
		entries:  map[string]*Entry{},
		sockets:  map[string]string{},
		pending:  map[string]string{},
		expected: slices.Clone(expected),
	}
}

func (r *registry) changed() {
	for _, ch := range r.notify {
		close(ch)
	}
	r.notify = nil
}

// Condition aggregates every driver's Ready into one condition of type
// condType. A socket whose GetInfo failed and an expected driver that has
// not registered count as Unknown.
func (w *Watcher) Condition(condType string) condition.Condition {
	r := w.reg
	r.mu.Lock()
	var items []condition.Item
	for _, e := range r.entries {
		items = append(items, condition.Item{Name: e.Spec.Name, Conditions: []condition.Condition{e.Ready()}})
	}
	for sock, why := range r.pending {
		items = append(items, condition.Item{Name: sock, Conditions: []condition.Condition{{
			Type: condition.TypeReady, Status: condition.Unknown, Reason: "GetInfoFailed", Message: why,
		}}})
	}
	for _, n := range r.expected {
		if _, ok := r.entries[n]; !ok {
			items = append(items, condition.Item{Name: n, Conditions: []condition.Condition{{
				Type: condition.TypeReady, Status: condition.Unknown, Reason: "NotRegistered", Message: "not registered yet",
			}}})
		}
	}
	r.mu.Unlock()
	sort.Slice(items, func(i, j int) bool { return items[i].Name < items[j].Name })
	return condition.Aggregate(condType, condition.TypeReady, 0, items)
}

// Changed returns a channel closed at the next change of any entry.
func (w *Watcher) Changed() <-chan struct{} {
	r := w.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	ch := make(chan struct{})
	r.notify = append(r.notify, ch)
	return ch
}
