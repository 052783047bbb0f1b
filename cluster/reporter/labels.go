package reporter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodeshim/nodeshim/cluster/apis/v1alpha1"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/shim/client"
	"github.com/nodeshim/nodeshim/shim/transfer"
)

// DefaultRestoreHandler is the runtime handler of the restoring
// RuntimeClass (deploy/runtimeclass: handler nodeshim).
const DefaultRestoreHandler = "nodeshim"

// ReportReader reads the shim's whole capability report (GET /report):
// the findings the capability labels are made of. It returns nil and no
// error while the shim has not collected one.
type ReportReader interface {
	Report(ctx context.Context) (*capability.Report, error)
}

// TransferInfoReader reads what other nodes' shims need to send this
// node a pod checkpoint (GET /transfers); nil and no error when the node
// receives none.
type TransferInfoReader interface {
	TransferInfo(ctx context.Context) (*transfer.Info, error)
}

// TransferInfo reads GET /transfers; a shim that receives no transfers
// (404) gives nil.
func (c *SocketClient) TransferInfo(ctx context.Context) (*transfer.Info, error) {
	return getOrNil[transfer.Info](ctx, c, "/transfers", http.StatusNotFound)
}

// TransferLabels returns the labels by which other nodes send this node
// pod checkpoints (v1alpha1.LabelTransferPort and
// LabelTransferRecipient), from in; none when in is nil or names no
// port or recipient that fits a label.
func TransferLabels(in *transfer.Info) map[string]string {
	out := map[string]string{}
	if in == nil || in.Port <= 0 || len(in.Recipients) == 0 || len(validation.IsValidLabelValue(in.Recipients[0])) > 0 {
		return out
	}
	out[v1alpha1.LabelTransferPort] = strconv.Itoa(in.Port)
	out[v1alpha1.LabelTransferRecipient] = in.Recipients[0]
	return out
}

// NodeLabeler writes the Node's capability labels; kubeapi.Client is one.
// labels maps a label to its value, or to nil to remove it; nothing else
// of the Node is sent.
type NodeLabeler interface {
	PatchNodeLabels(ctx context.Context, name string, labels map[string]*string, fieldManager string) error
}

// Report reads GET /report; a shim that has not collected its report yet
// (503) gives nil.
func (c *SocketClient) Report(ctx context.Context) (*capability.Report, error) {
	return getOrNil[capability.Report](ctx, c, "/report", http.StatusServiceUnavailable)
}

// getOrNil reads the shim's path into a new T; an answer of status code
// absent (the shim has none to give) is nil and no error.
func getOrNil[T any](ctx context.Context, c *SocketClient, path string, absent int) (*T, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	var v T
	err := c.c.GetJSON(ctx, path, &v)
	var se *client.StatusError
	if errors.As(err, &se) && se.Code == absent {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// CapabilityLabels returns the capability labels (v1alpha1.Label*) that
// rep and the node's runtime handlers establish. A finding the shim could
// not decide (Unknown) makes no label: neither "true" nor "false" is
// claimed. A nil report (none collected, or the shim unreachable) makes
// none at all, so that no stale "true" stays on the Node.
func CapabilityLabels(rep *capability.Report, handlers []corev1.NodeRuntimeHandler, restoreHandler string) map[string]string {
	out := map[string]string{}
	if rep == nil {
		return out
	}
	verdicts := make(map[string]capability.Result, len(rep.Requirements))
	for _, r := range rep.Requirements {
		verdicts[r.ID] = r
	}
	// holds is the label value of the requirements ids: "true" when every
	// one is Supported, "false" when one is Unsupported or Degraded, ""
	// (no label) when one is Unknown or absent from the report.
	holds := func(ids ...string) string {
		v := v1alpha1.LabelTrue
		for _, id := range ids {
			r, ok := verdicts[id]
			switch {
			case !ok || r.Verdict == capability.Unknown:
				return ""
			case r.Verdict != capability.Supported:
				v = "false"
			}
		}
		return v
	}
	set := func(label, v string) {
		if v != "" && len(validation.IsValidLabelValue(v)) == 0 {
			out[label] = v
		}
	}
	set(v1alpha1.LabelCRIU, holds("criu.check"))
	set(v1alpha1.LabelLazyPages, holds("criu.check", "criu.lazy_pages", "criu.feature.uffd-noncoop"))
	set(v1alpha1.LabelPreCopy, holds("criu.check", "criu.feature.mem_dirty_track"))
	if r, ok := verdicts["criu.version"]; ok {
		set(v1alpha1.LabelCRIUVersion, criuVersion(r))
	}
	set(v1alpha1.LabelArch, rep.Kernel.Arch)
	// kubelet fills status.runtimeHandlers from the runtime's CRI status
	// (Kubernetes 1.30, KEP-3857; containerd 2.0 reports its handlers);
	// before it has, the handler's presence is unknown.
	if handlers != nil {
		v := "false"
		for _, h := range handlers {
			if h.Name == restoreHandler {
				v = v1alpha1.LabelTrue
			}
		}
		set(v1alpha1.LabelRestoreRuntimeClass, v)
	}
	return out
}

// criuVersion returns the version a criu.version finding names: its
// evidence is "criu --version: X[ (cached...)]" when Supported and "criu
// X is older than Y" when Degraded; "" otherwise.
func criuVersion(r capability.Result) string {
	var rest string
	switch r.Verdict {
	case capability.Supported:
		v, ok := strings.CutPrefix(r.Evidence, "criu --version: ")
		if !ok {
			return ""
		}
		rest = v
	case capability.Degraded:
		v, ok := strings.CutPrefix(r.Evidence, "criu ")
		if !ok {
			return ""
		}
		rest = v
	default:
		return ""
	}
	v, _, _ := strings.Cut(rest, " ")
	if v == "" || strings.Trim(v, "0123456789.") != "" {
		return ""
	}
	return v
}

// LabelPatch returns the labels to set (the value) and remove (nil) so
// that the Node, labelled current, carries exactly want under
// v1alpha1.LabelPrefix; labels outside the prefix are never named. An
// empty patch means nothing to write.
func LabelPatch(current, want map[string]string) map[string]*string {
	patch := map[string]*string{}
	for k, v := range want {
		if cur, ok := current[k]; !ok || cur != v {
			patch[k] = &v
		}
	}
	for k := range current {
		if _, ok := want[k]; !ok && strings.HasPrefix(k, v1alpha1.LabelPrefix) {
			patch[k] = nil
		}
	}
	return patch
}

// labelState is what the status loop knows of the labels it published.
type labelState struct {
	// key is the report digest and shim reachability the last labels
	// were made from; syncLabels writes again when it changes.
	key string
	// at is when the labels were last made; they are made again every
	// ResyncPeriod (kubelet's runtime handlers may change meanwhile).
	at time.Time
	// published are the capability labels last written.
	published map[string]string
}

// syncLabels keeps the Node's capability labels in step with the shim's
// report and transfer listener: when the report's digest, the shim's
// instance or active configuration (which decide its transfer port and
// recipient) or its reachability changed, or once every ResyncPeriod. It reads the report and the Node (its
// labels and runtime handlers), and sends a JSON merge patch of the
// labels alone, through the status subresource the reporter may already
// patch, naming only labels under v1alpha1.LabelPrefix. A failure is
// retried at the next sync.
func (r *Reporter) syncLabels(ctx context.Context, doc Snapshot, shimErr error) {
	nl, ok := r.opts.Client.(NodeLabeler)
	if r.opts.Report == nil || !ok {
		return
	}
	key := labelsKey(doc)
	if shimErr != nil {
		key = "unreachable"
	}
	now := r.clk.Now()
	if key == r.labels.key && !r.labels.at.IsZero() && now.Sub(r.labels.at) < r.opts.ResyncPeriod {
		return
	}
	if err := r.writeLabels(ctx, nl, shimErr); err != nil {
		if ctx.Err() == nil {
			r.log.Warn("publish capability labels", "err", err)
		}
		return
	}
	r.labels.key, r.labels.at = key, now
}

// labelsKey is what the capability and transfer labels of doc's shim
// depend on: its report, the process it is (a restarted shim listens on
// another port) and its active configuration (which names its keys).
func labelsKey(doc Snapshot) string {
	key := ReportDigest(doc.Report) + "|" + doc.Shim.StartedAt.UTC().Format(time.RFC3339Nano) + "|" + strconv.Itoa(doc.Shim.PID)
	if doc.Config != nil && doc.Config.Active != nil {
		key += "|" + doc.Config.Active.UID
	}
	return key
}

func (r *Reporter) writeLabels(ctx context.Context, nl NodeLabeler, shimErr error) error {
	rctx, cancel := context.WithTimeout(ctx, r.opts.RequestTimeout)
	defer cancel()
	var rep *capability.Report
	if shimErr == nil {
		var err error
		if rep, err = r.opts.Report.Report(rctx); err != nil {
			r.m.failures.WithLabelValues(kindShim).Inc()
			return fmt.Errorf("read the capability report: %w", err)
		}
	}
	node, err := r.opts.Client.GetNode(rctx, r.opts.NodeName)
	if err != nil {
		r.m.failures.WithLabelValues(kindNode).Inc()
		return fmt.Errorf("get node %s: %w", r.opts.NodeName, err)
	}
	want := CapabilityLabels(rep, node.Status.RuntimeHandlers, r.opts.RestoreHandler)
	if tr, ok := r.opts.Report.(TransferInfoReader); ok && shimErr == nil {
		in, err := tr.TransferInfo(rctx)
		if err != nil {
			r.m.failures.WithLabelValues(kindShim).Inc()
			return fmt.Errorf("read the shim's transfer info: %w", err)
		}
		maps.Copy(want, TransferLabels(in))
	}
	patch := LabelPatch(node.Labels, want)
	if len(patch) > 0 {
		if err := nl.PatchNodeLabels(rctx, r.opts.NodeName, patch, Component); err != nil {
			r.m.failures.WithLabelValues(kindLabels).Inc()
			return fmt.Errorf("patch labels of node %s: %w", r.opts.NodeName, err)
		}
		r.m.writes.WithLabelValues(kindLabels).Inc()
		b, _ := json.Marshal(want)
		r.log.Info("published capability labels", "labels", string(b))
	}
	r.labels.published = want
	r.mu.Lock()
	r.state.Labels = maps.Clone(want)
	r.mu.Unlock()
	return nil
}
