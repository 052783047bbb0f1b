package reporter

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/shim/status"
)

// Condition types, reasons and annotations the reporter publishes.
const (
	// TypePrefix starts every node condition type nodeshim publishes.
	TypePrefix = "NodeShim"
	// TypeNodeShimReady is the shim's Ready summary on the Node, and False
	// with ReasonShimUnreachable when the shim cannot be read.
	TypeNodeShimReady = TypePrefix + condition.TypeReady
	// ReasonShimUnreachable says that the reporter cannot read the shim.
	ReasonShimUnreachable = "ShimUnreachable"
	// ReasonNotReported marks a condition published earlier that the shim
	// no longer reports.
	ReasonNotReported = "NotReported"
	// ReasonReporterStopped marks a condition that the nodeshim controller
	// set to Unknown because the node's reporter stopped renewing its
	// Lease. The reporter replaces it on its next publish.
	ReasonReporterStopped = "ReporterStopped"

	// AnnotationDigest holds the digest of the published status.
	AnnotationDigest = "nodeshim.io/status-digest"
	// AnnotationVersion holds the reporter's version.
	AnnotationVersion = "nodeshim.io/reporter-version"
	// AnnotationReportDigest holds the digest of the capability report's
	// summary as the shim serves it.
	AnnotationReportDigest = "nodeshim.io/report-digest"
)

// kubeletTypes are the node condition types kubelet owns: nodeshim never
// writes them.
var kubeletTypes = []corev1.NodeConditionType{
	corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure,
	corev1.NodePIDPressure, corev1.NodeNetworkUnavailable,
}

// KubeletOwned reports whether t is one of kubelet's node condition types.
func KubeletOwned(t corev1.NodeConditionType) bool {
	return slices.Contains(kubeletTypes, t)
}

// NodeConditionType names the shim's condition type on the Node: the shim's
// Ready becomes NodeShimReady, every other type T becomes NodeShimT (the
// shim's own view of memory pressure is NodeShimMemoryPressure, never
// kubelet's MemoryPressure).
func NodeConditionType(shimType string) corev1.NodeConditionType {
	if strings.HasPrefix(shimType, TypePrefix) {
		return corev1.NodeConditionType(shimType)
	}
	return corev1.NodeConditionType(TypePrefix + shimType)
}

// Owned reports whether t is a node condition type the reporter publishes.
func Owned(t corev1.NodeConditionType) bool {
	return strings.HasPrefix(string(t), TypePrefix) && !KubeletOwned(t)
}

// Desired returns the node conditions for the shim's document, without
// times, sorted by type. A known type the document lacks is Unknown with
// reason NotReported. When shimErr is set (the shim cannot be read),
// NodeShimReady is False with reason ShimUnreachable and each of the known
// types is Unknown with that reason, so that no stale True remains.
func Desired(doc status.Document, shimErr error, known []corev1.NodeConditionType) []corev1.NodeCondition {
	var out []corev1.NodeCondition
	if shimErr != nil {
		msg := fmt.Sprintf("cannot read the nodeshim status: %v", shimErr)
		out = append(out, corev1.NodeCondition{Type: TypeNodeShimReady, Status: corev1.ConditionFalse,
			Reason: ReasonShimUnreachable, Message: msg})
		for _, t := range known {
			if t == TypeNodeShimReady || !Owned(t) {
				continue
			}
			out = append(out, corev1.NodeCondition{Type: t, Status: corev1.ConditionUnknown,
				Reason: ReasonShimUnreachable, Message: msg})
		}
	} else {
		for _, c := range doc.Conditions {
			nc := NodeCondition(c)
			if KubeletOwned(nc.Type) || slices.ContainsFunc(out, func(o corev1.NodeCondition) bool { return o.Type == nc.Type }) {
				continue
			}
			out = append(out, nc)
		}
		for _, t := range known {
			if !Owned(t) || slices.ContainsFunc(out, func(o corev1.NodeCondition) bool { return o.Type == t }) {
				continue
			}
			// Published before, gone from the shim now (a source was
			// removed): Unknown, not its last status forever.
			out = append(out, corev1.NodeCondition{Type: t, Status: corev1.ConditionUnknown,
				Reason: ReasonNotReported, Message: "the nodeshim status no longer reports this condition"})
		}
		if !slices.ContainsFunc(out, func(o corev1.NodeCondition) bool { return o.Type == TypeNodeShimReady }) {
			// A document without Ready is not a healthy one.
			out = append(out, corev1.NodeCondition{Type: TypeNodeShimReady, Status: corev1.ConditionUnknown,
				Reason: condition.ReasonNotFound, Message: "the nodeshim status has no Ready condition"})
		}
	}
	slices.SortFunc(out, func(a, b corev1.NodeCondition) int { return strings.Compare(string(a.Type), string(b.Type)) })
	return out
}

// NodeCondition converts one of the shim's conditions to the Node condition
// the reporter publishes for it, without times (Plan stamps them): the one
// place where nodeshim's condition.Condition becomes a
// corev1.NodeCondition. Its type is NodeConditionType's; its severity is
// not published (a Node condition has no such field); an empty reason
// becomes NoReason, as the API server requires one.
func NodeCondition(c condition.Condition) corev1.NodeCondition {
	reason := c.Reason
	if reason == "" {
		reason = "NoReason"
	}
	return corev1.NodeCondition{Type: NodeConditionType(c.Type), Status: corev1.ConditionStatus(c.Status), Reason: reason, Message: c.Message}
}

// Transition is a change of a published condition's status.
type Transition struct {
	// Condition is the new state.
	Condition corev1.NodeCondition
	// Previous is the status before; empty when the type is new.
	Previous corev1.ConditionStatus
}

// Plan stamps want with times against the published conditions prev:
// lastTransitionTime is kept while a status stays the same and moves to now
// when it changes; lastHeartbeatTime is now. It reports whether anything
// but the heartbeat differs from prev, and the status transitions.
func Plan(prev []corev1.NodeCondition, want []corev1.NodeCondition, now metav1.Time) (out []corev1.NodeCondition, changed bool, trans []Transition) {
	out = make([]corev1.NodeCondition, 0, len(want))
	for _, w := range want {
		w.LastHeartbeatTime = now
		i := slices.IndexFunc(prev, func(p corev1.NodeCondition) bool { return p.Type == w.Type })
		switch {
		case i < 0:
			w.LastTransitionTime = now
			changed = true
			trans = append(trans, Transition{Condition: w})
		case prev[i].Status != w.Status:
			w.LastTransitionTime = now
			changed = true
			trans = append(trans, Transition{Condition: w, Previous: prev[i].Status})
		default:
			w.LastTransitionTime = prev[i].LastTransitionTime
			if prev[i].Reason != w.Reason || prev[i].Message != w.Message {
				changed = true
			}
		}
		out = append(out, w)
	}
	return out, changed, trans
}

// Digest is a digest of the conditions' types, statuses, reasons and
// messages (not their times): the value of AnnotationDigest.
func Digest(conds []corev1.NodeCondition) string {
	h := sha256.New()
	for _, c := range conds {
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00", c.Type, c.Status, c.Reason, c.Message)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// Published returns the reporter's own conditions among a Node's
// conditions, sorted by type as Desired sorts them.
func Published(conds []corev1.NodeCondition) []corev1.NodeCondition {
	var out []corev1.NodeCondition
	for _, c := range conds {
		if Owned(c.Type) {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b corev1.NodeCondition) int { return strings.Compare(string(a.Type), string(b.Type)) })
	return out
}

// normal reports whether c is in its good state, with the polarity of the
// shim's type: nodeshim's own types are good when True, its views of
// kubelet's pressure types (NodeShimMemoryPressure...) when False.
func normal(c corev1.NodeCondition) bool {
	return condition.NormalStatus(strings.TrimPrefix(string(c.Type), TypePrefix), metav1.ConditionStatus(c.Status))
}

// ReportDigest is the digest of a capability report summary (compacted
// JSON), or "" when there is none.
func ReportDigest(report json.RawMessage) string {
	var b bytes.Buffer
	if len(report) == 0 || json.Compact(&b, report) != nil || b.String() == "null" {
		return ""
	}
	sum := sha256.Sum256(b.Bytes())
	return "sha256:" + hex.EncodeToString(sum[:])
}
