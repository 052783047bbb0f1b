// Package condition is nodeshim's status-condition model: conditions in the
// shape of metav1.Condition plus a severity, a Set that records transitions
// without churn, and the Ready summary, Mirror and Aggregate helpers that
// derive one condition from others.
//
// Unknown is a state of its own throughout: it is never counted as True or
// as False, and a condition that is missing is reported as Unknown with a
// reason rather than as healthy.
package condition

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Status values, the same strings as metav1.ConditionStatus.
const (
	True    = metav1.ConditionTrue
	False   = metav1.ConditionFalse
	Unknown = metav1.ConditionUnknown
)

// Severity says how bad an abnormal condition is. It is set only while a
// condition is in its abnormal state (False for nodeshim's positive-polarity
// types, True for kubelet's pressure types) and empty otherwise.
type Severity string

// Severities, from the most to the least urgent.
const (
	SeverityError   Severity = "Error"
	SeverityWarning Severity = "Warning"
	SeverityInfo    Severity = "Info"
)

// Well-known condition types. nodeshim's own types have positive polarity
// (True is good); the kubelet types listed in NegativePolarity keep
// kubelet's polarity (True is bad).
const (
	TypeReady = "Ready"

	TypeMemoryPressure     = "MemoryPressure"
	TypeDiskPressure       = "DiskPressure"
	TypePIDPressure        = "PIDPressure"
	TypeNetworkUnavailable = "NetworkUnavailable"
)

// Reasons used by the derived conditions of this package.
const (
	ReasonAllReady        = "AllConditionsReady"
	ReasonNotFound        = "ConditionNotFound"
	ReasonNoItems         = "NoItems"
	ReasonInProgress      = "InProgress"
	ReasonMultipleReasons = "MultipleProblems"
)

// ReasonNotStarted is the reason of a source's condition before the source
// has reported its first state.
const ReasonNotStarted = "NotStarted"

// NegativePolarity reports whether t is one of kubelet's node condition types
// for which True means a problem (MemoryPressure, DiskPressure, PIDPressure,
// NetworkUnavailable).
func NegativePolarity(t string) bool {
	switch t {
	case TypeMemoryPressure, TypeDiskPressure, TypePIDPressure, TypeNetworkUnavailable:
		return true
	}
	return false
}

// Condition is one observation about the node, field for field a
// metav1.Condition plus Severity.
type Condition struct {
	// Type is the condition's CamelCase name, e.g. NetworkReady.
	Type string `json:"type"`
	// Status is True, False or Unknown.
	Status metav1.ConditionStatus `json:"status"`
	// Severity is set only while the condition is abnormal.
	Severity Severity `json:"severity,omitempty"`
	// ObservedGeneration is the generation of the input the condition was computed from.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// LastTransitionTime is when Status last changed.
	LastTransitionTime metav1.Time `json:"lastTransitionTime"`
	// Reason is a CamelCase, machine-readable cause.
	Reason string `json:"reason"`
	// Message is for humans.
	Message string `json:"message"`
	// Polarity is PolarityKubelet for kubelet's negative-polarity types
	// (True means a problem) and empty for nodeshim's own positive ones.
	Polarity string `json:"polarity,omitempty"`
}

// PolarityKubelet labels a condition that keeps kubelet's negative
// polarity: MemoryPressure, DiskPressure, PIDPressure, NetworkUnavailable.
const PolarityKubelet = "KubeletNegative"

// Labelled returns c with Polarity set from its type.
func (c Condition) Labelled() Condition {
	c.Polarity = ""
	if NegativePolarity(c.Type) {
		c.Polarity = PolarityKubelet
	}
	return c
}

// Abnormal reports whether c is in its bad state: False for positive
// polarity, True for kubelet's negative-polarity types. Unknown is neither
// normal nor abnormal.
func (c Condition) Abnormal() bool {
	if NegativePolarity(c.Type) {
		return c.Status == True
	}
	return c.Status == False
}

// Normal reports whether c is in its good state. Unknown is not Normal.
func (c Condition) Normal() bool { return NormalStatus(c.Type, c.Status) }

// NormalStatus reports whether status is the good state of a condition of
// type t: False for kubelet's negative-polarity types, True otherwise.
// Unknown is never normal.
func NormalStatus(t string, status metav1.ConditionStatus) bool {
	if NegativePolarity(t) {
		return status == False
	}
	return status == True
}

// EffectiveSeverity is the severity c counts with in a summary: its own
// Severity when abnormal (Error when left empty, the conservative choice),
// and empty when c is normal or Unknown.
func (c Condition) EffectiveSeverity() Severity {
	if !c.Abnormal() {
		return ""
	}
	if c.Severity == "" {
		return SeverityError
	}
	return c.Severity
}

// Metav1 returns c as a metav1.Condition, dropping Severity.
func (c Condition) Metav1() metav1.Condition {
	return metav1.Condition{
		Type:               c.Type,
		Status:             c.Status,
		ObservedGeneration: c.ObservedGeneration,
		LastTransitionTime: c.LastTransitionTime,
		Reason:             c.Reason,
		Message:            c.Message,
	}
}

// Validate checks the fields a condition must have: a type, one of the
// three statuses, a CamelCase reason, and a severity only when abnormal.
func (c Condition) Validate() error {
	if c.Type == "" {
		return fmt.Errorf("condition has no type")
	}
	switch c.Status {
	case True, False, Unknown:
	default:
		return fmt.Errorf("condition %s: status %q is not True, False or Unknown", c.Type, c.Status)
	}
	if c.Reason == "" {
		return fmt.Errorf("condition %s: empty reason", c.Type)
	}
	for i, r := range c.Reason {
		isUpper := r >= 'A' && r <= 'Z'
		isAlnum := isUpper || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9')
		if (i == 0 && !isUpper) || !isAlnum {
			return fmt.Errorf("condition %s: reason %q is not CamelCase", c.Type, c.Reason)
		}
	}
	if c.Severity != "" && !c.Abnormal() {
		return fmt.Errorf("condition %s: severity %s set while status is %s", c.Type, c.Severity, c.Status)
	}
	switch c.Severity {
	case "", SeverityError, SeverityWarning, SeverityInfo:
	default:
		return fmt.Errorf("condition %s: unknown severity %q", c.Type, c.Severity)
	}
	return nil
}

// Progress returns a long-running operation as a condition: False with
// Severity Info and a step counter in the message ("... (2 of 3)"), so
// that a summary shows the operation without calling it a failure.
func Progress(condType, reason, what string, step, total int) Condition {
	return Condition{
		Type:     condType,
		Status:   False,
		Severity: SeverityInfo,
		Reason:   reason,
		Message:  fmt.Sprintf("%s (%d of %d)", what, step, total),
	}
}

// Set is an ordered list of conditions with at most one per type.
type Set struct {
	conds []Condition
}

// Get returns the condition of type t and whether it exists.
func (s *Set) Get(t string) (Condition, bool) {
	for _, c := range s.conds {
		if c.Type == t {
			return c, true
		}
	}
	return Condition{}, false
}

// List returns a copy of the conditions in the order they were first set.
func (s *Set) List() []Condition {
	out := make([]Condition, len(s.conds))
	copy(out, s.conds)
	return out
}

// Update records c, observed at now. LastTransitionTime moves to now only
// when the status changes (or the type is new); a severity outside the
// abnormal state is dropped. It reports whether anything visible changed, so
// that callers publish only real transitions: setting the same status,
// reason, message, severity and generation again is not a change.
func (s *Set) Update(c Condition, now time.Time) bool {
	if !c.Abnormal() {
		c.Severity = ""
	}
	for i, old := range s.conds {
		if old.Type != c.Type {
			continue
		}
		if old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		} else {
			c.LastTransitionTime = metav1.NewTime(now)
		}
		if old == c {
			return false
		}
		s.conds[i] = c
		return true
	}
	c.LastTransitionTime = metav1.NewTime(now)
	s.conds = append(s.conds, c)
	return true
}

// Remove deletes the condition of type t and reports whether it existed.
func (s *Set) Remove(t string) bool {
	for i, c := range s.conds {
		if c.Type == t {
			s.conds = append(s.conds[:i], s.conds[i+1:]...)
			return true
		}
	}
	return false
}

// rank orders the groups of a summary: errors, warnings, Unknown, info.
func rank(c Condition) int {
	switch {
	case c.Status == Unknown:
		return 2
	case !c.Abnormal():
		return 4
	}
	switch c.EffectiveSeverity() {
	case SeverityError:
		return 0
	case SeverityWarning:
		return 1
	default:
		return 3
	}
}

// Summarize computes a condition of type summaryType from conds, skipping
// any condition of that type itself:
//
//   - every condition normal: True, reason AllConditionsReady;
//   - otherwise the worst group decides: any Error or Warning makes it False
//     with that severity; else any Unknown makes it Unknown; else (only
//     Info, i.e. operations in progress) it is False with Severity Info.
//
// The reason is the first problem's reason (MultipleProblems when several
// conditions are not normal), and the message lists every non-normal
// condition, errors first, then warnings, then Unknown, then info, each as
// "Type: message". The LastTransitionTime is left zero for Set.Update.
func Summarize(summaryType string, generation int64, conds []Condition) Condition {
	var groups [5][]Condition
	for _, c := range conds {
		if c.Type == summaryType {
			continue
		}
		r := rank(c)
		groups[r] = append(groups[r], c)
	}
	out := Condition{Type: summaryType, ObservedGeneration: generation}
	var problems []Condition
	for _, g := range groups[:4] {
		problems = append(problems, g...)
	}
	if len(problems) == 0 {
		out.Status = True
		out.Reason = ReasonAllReady
		return out
	}
	switch {
	case len(groups[0]) > 0:
		out.Status, out.Severity = False, SeverityError
	case len(groups[1]) > 0:
		out.Status, out.Severity = False, SeverityWarning
	case len(groups[2]) > 0:
		out.Status = Unknown
	default:
		out.Status, out.Severity = False, SeverityInfo
	}
	if len(problems) == 1 {
		out.Reason = problems[0].Reason
	} else {
		out.Reason = ReasonMultipleReasons
	}
	msgs := make([]string, 0, len(problems))
	for _, p := range problems {
		msgs = append(msgs, describe(p.Type, p))
	}
	out.Message = strings.Join(msgs, "; ")
	return out
}

func describe(name string, c Condition) string {
	m := c.Message
	if m == "" {
		m = c.Reason
	}
	if c.Status == Unknown {
		return fmt.Sprintf("%s (Unknown): %s", name, m)
	}
	return fmt.Sprintf("%s: %s", name, m)
}

// Mirror copies the condition of type from in src to a condition named as,
// keeping status, severity, reason, message, generation and transition time.
// A missing source condition mirrors as Unknown with reason
// ConditionNotFound, never as a healthy zero.
func Mirror(src []Condition, from, as string) Condition {
	for _, c := range src {
		if c.Type == from {
			c.Type = as
			if NegativePolarity(from) != NegativePolarity(as) {
				// Mirroring across polarities inverts the status so that
				// the meaning is kept; Unknown stays Unknown.
				switch c.Status {
				case True:
					c.Status = False
				case False:
					c.Status = True
				}
			}
			return c
		}
	}
	return Condition{
		Type:    as,
		Status:  Unknown,
		Reason:  ReasonNotFound,
		Message: fmt.Sprintf("no %s condition to mirror", from),
	}
}

// Item is one object taking part in an aggregate: its name and its
// conditions, of which the one named by the aggregate is used.
type Item struct {
	Name       string
	Conditions []Condition
}

// Aggregate folds the condType condition of many objects (e.g. the Ready of
// every plugin driver) into one condition named as, with the ordering and
// message rules of Summarize; each message is prefixed by the object's
// name. An object without that condition counts as Unknown. No objects at
// all gives True with reason NoItems.
func Aggregate(as, condType string, generation int64, items []Item) Condition {
	if len(items) == 0 {
		return Condition{Type: as, Status: True, Reason: ReasonNoItems, ObservedGeneration: generation}
	}
	per := make([]Condition, 0, len(items))
	for _, it := range items {
		// Mirroring to Ready inverts kubelet's negative polarity; the
		// object's name then stands in for the type in the message.
		c := Mirror(it.Conditions, condType, TypeReady)
		c.Type = it.Name
		per = append(per, c)
	}
	return Summarize(as, generation, per)
}
