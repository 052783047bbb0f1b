// Package configstatus is the configuration lifecycle's status as the
// status document shows it: NodeConfigStatus and its ConfigHealthy
// condition. It is apart from package config so that readers of the
// document (the reporter) do not link what config reads (kubelet's
// configuration types and, with them, component-base).
package configstatus

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/condition"
)

// SourceRef names one configuration payload, kept on disk as a snapshot
// under its UID.
type SourceRef struct {
	// UID is the payload's content hash (Payload.UID).
	UID string `json:"uid"`
	// AssignedAt is when the payload was first recorded as assigned; the
	// soak period is measured from it.
	AssignedAt metav1.Time `json:"assignedAt"`
}

// NodeConfigStatus reports the configuration lifecycle in the shape of
// Kubernetes' NodeConfigStatus. A nil reference means the local defaults.
type NodeConfigStatus struct {
	// Assigned is the payload most recently recorded from the source.
	Assigned *SourceRef `json:"assigned,omitempty"`
	// Active is the payload in use.
	Active *SourceRef `json:"active,omitempty"`
	// LastKnownGood is the payload rolled back to when Assigned fails.
	LastKnownGood *SourceRef `json:"lastKnownGood,omitempty"`
	// Error is a human-readable message; it is empty when all is well.
	// Machines check only whether it is empty.
	Error string `json:"error,omitempty"`
	// SoakingUntil is when Assigned becomes last-known-good if it stays
	// active; nil when no payload is on trial.
	SoakingUntil *metav1.Time `json:"soakingUntil,omitempty"`
}

// Condition types and reasons reported by the lifecycle.
const (
	ConditionConfigHealthy = "ConfigHealthy"

	ReasonConfigActive      = "ConfigActive"
	ReasonConfigTrial       = "ConfigOnTrial"
	ReasonConfigRolledBack  = "ConfigRolledBack"
	ReasonConfigSourceError = "ConfigSourceError"
)

// Condition summarises the lifecycle as the ConfigHealthy condition: False
// with Error after a rollback, False with Warning after a source error, and
// True otherwise. A new payload on trial is True too, with reason
// ConfigOnTrial and its step ("2 of 3") and soak deadline in the message:
// soaking is normal operation and must not make the node unready.
func (s NodeConfigStatus) Condition() condition.Condition {
	c := condition.Condition{Type: ConditionConfigHealthy}
	switch {
	case s.Error != "" && (s.Assigned == nil || s.Active == nil || s.Active.UID != s.Assigned.UID):
		c.Status, c.Severity, c.Reason, c.Message = condition.False, condition.SeverityError, ReasonConfigRolledBack, s.Error
	case s.Error != "":
		c.Status, c.Severity, c.Reason, c.Message = condition.False, condition.SeverityWarning, ReasonConfigSourceError, s.Error
	case s.Assigned != nil && (s.LastKnownGood == nil || s.LastKnownGood.UID != s.Assigned.UID):
		until := "its soak period ends"
		if s.SoakingUntil != nil {
			until = s.SoakingUntil.UTC().Format(time.RFC3339)
		}
		c.Status, c.Reason = condition.True, ReasonConfigTrial
		c.Message = fmt.Sprintf("config %s active and on trial until %s (step 2 of 3: assigned, active, last-known-good)",
			short(s.Assigned.UID), until)
	default:
		c.Status, c.Reason = condition.True, ReasonConfigActive
		if s.Active == nil {
			c.Message = "local defaults"
		} else {
			c.Message = "config " + short(s.Active.UID)
		}
	}
	return c
}

func short(uid string) string {
	if len(uid) > 12 {
		return uid[:12]
	}
	return uid
}
