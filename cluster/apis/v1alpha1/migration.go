package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nodeshim/nodeshim/condition"
)

// MigrationMode is how a PodMigration moves the pod's memory.
type MigrationMode string

// The modes of a PodMigration.
const (
	// ModeStopAndCopy checkpoints the whole pod once (frozen for the
	// checkpoint), sends it, and restores it. The original runs on from
	// its thaw until the restored pod runs, and what it does meanwhile is
	// not carried over. The default.
	ModeStopAndCopy MigrationMode = "StopAndCopy"
	// ModePreCopy would copy memory in rounds while the pod runs
	// (LabelPreCopy on both nodes); refused: not built for pods yet.
	ModePreCopy MigrationMode = "PreCopy"
	// ModeLazy (post-copy) checkpoints the pod without its memory
	// (PodCheckpointSpec.Lazy), sends that, and restores it at once: the
	// restored pod fetches its memory from the source node's page servers
	// over mutual TLS, on its page faults first and the rest in the
	// background, while the original stays frozen; the original's
	// containers end once their memory is fetched, so nothing forks. It
	// needs LabelLazyPages on both nodes and DeleteOriginal. If the move
	// fails first, the original is thawed and runs on.
	ModeLazy MigrationMode = "Lazy"
)

// MigrationPhase is where a PodMigration stands.
type MigrationPhase string

// The phases of a PodMigration, in order; Failed may follow any but
// Succeeded.
const (
	// MigrationPending: the controller has not taken it up yet.
	MigrationPending MigrationPhase = ""
	// MigrationCheckpointing: the target passed its checks and a
	// PodCheckpoint of the pod was created on the source node.
	MigrationCheckpointing MigrationPhase = "Checkpointing"
	// MigrationTransferring: the pod checkpoint is stored on the source
	// and is being sent to the target's shim.
	MigrationTransferring MigrationPhase = "Transferring"
	// MigrationRestoring: the restored Pod was created on the target.
	MigrationRestoring MigrationPhase = "Restoring"
	// MigrationSucceeded: the restored Pod runs on the target (and the
	// original was deleted, when asked).
	MigrationSucceeded MigrationPhase = "Succeeded"
	// MigrationFailed: it failed; the conditions say at which step and
	// why. The original pod was left running.
	MigrationFailed MigrationPhase = "Failed"
)

// The condition types of a PodMigration's status, one per step.
const (
	// ConditionCheckpointed is True once the pod checkpoint is stored on
	// the source node; False when it failed, or when the migration was
	// refused before anything was frozen (reason TargetNotCapable, ...).
	ConditionCheckpointed = "Checkpointed"
	// ConditionTransferred is True once the target's shim stored it.
	ConditionTransferred = "Transferred"
	// ConditionRestored is True once the restored Pod runs on the target.
	ConditionRestored = "Restored"
)

// The reasons of the Transferred step, the one step the source node's
// reporter records (the controller the others): the controller sets it
// in progress (Transferring), the reporter ends it (Transferred, or
// TransferFailed with the shim's error).
const (
	ReasonTransferring   = "Transferring"
	ReasonTransferred    = "Transferred"
	ReasonTransferFailed = "TransferFailed"
)

// SetConditions records conds, at now, and their Ready summary in m's
// status, with m's generation observed.
func (m *PodMigration) SetConditions(now time.Time, conds ...condition.Condition) {
	var s condition.Set
	for _, x := range m.Status.Conditions {
		s.Update(x, x.LastTransitionTime.Time)
	}
	for _, x := range conds {
		x.ObservedGeneration = m.Generation
		s.Update(x, now)
	}
	s.Update(condition.Summarize(condition.TypeReady, m.Generation, s.List()), now)
	m.Status.Conditions = s.List()
	m.Status.ObservedGeneration = m.Generation
}

// AnnotationMigration is set on the Pod a PodMigration restores: the
// PodMigration's name.
const AnnotationMigration = "migration.nodeshim.io/name"

// AnnotationOnDrain on a Pod says what a drain of its node does with it
// (cluster/drain): DrainMigrate moves it to another node with its state;
// without it the pod is evicted, as `kubectl drain` would.
const AnnotationOnDrain = "migration.nodeshim.io/on-drain"

// DrainMigrate is the AnnotationOnDrain value that moves a pod.
const DrainMigrate = "migrate"

// PodMigration asks for one pod of its namespace to be moved to another
// node with its state: checkpointed on its node, sent to the target's
// shim, and restored there under the restoring RuntimeClass.
type PodMigration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PodMigrationSpec   `json:"spec"`
	Status PodMigrationStatus `json:"status,omitempty"`
}

// PodMigrationSpec is what a PodMigration asks for.
type PodMigrationSpec struct {
	// PodName names the pod, in the object's namespace.
	PodName string `json:"podName"`
	// TargetNode names the node to move it to; or else NodeSelector
	// chooses among the nodes with these labels (the first by name that
	// has every capability the migration needs).
	TargetNode   string            `json:"targetNode,omitempty"`
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Mode is how the memory moves; ModeStopAndCopy when empty.
	Mode MigrationMode `json:"mode,omitempty"`
	// DeleteOriginal deletes the original pod once the restored one runs.
	DeleteOriginal bool `json:"deleteOriginal,omitempty"`
}

// PodMigrationStatus is what became of a PodMigration.
type PodMigrationStatus struct {
	// ObservedGeneration is the generation of the spec this status is of.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase is where it stands.
	Phase MigrationPhase `json:"phase,omitempty"`
	// SourceNode and TargetNode are the nodes it moves between.
	SourceNode string `json:"sourceNode,omitempty"`
	TargetNode string `json:"targetNode,omitempty"`
	// PodUID is the uid of the original pod.
	PodUID string `json:"podUID,omitempty"`
	// PodCheckpoint names the PodCheckpoint made on the source (owned by
	// this object: deleting it removes the checkpoint there).
	PodCheckpoint string `json:"podCheckpoint,omitempty"`
	// Checkpoint is the pod checkpoint's name in both nodes' checkpoint
	// directories.
	Checkpoint string `json:"checkpoint,omitempty"`
	// RestoredPod names the Pod restored on the target.
	RestoredPod string `json:"restoredPod,omitempty"`
	// StartTime and CompletionTime bound the migration.
	StartTime      *metav1.Time `json:"startTime,omitempty"`
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// Downtime is from the checkpoint's start on the source (the pod's
	// state is frozen from then on) to the restored Pod seen running on
	// the target: an upper bound of what the pod's clients saw.
	Downtime *metav1.Duration `json:"downtime,omitempty"`
	// Conditions are Checkpointed, Transferred, Restored and their Ready
	// summary.
	Conditions []condition.Condition `json:"conditions,omitempty"`
}

// DeepCopyInto copies m into out.
func (m *PodMigration) DeepCopyInto(out *PodMigration) {
	*out = *m
	m.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if m.Spec.NodeSelector != nil {
		out.Spec.NodeSelector = make(map[string]string, len(m.Spec.NodeSelector))
		for k, v := range m.Spec.NodeSelector {
			out.Spec.NodeSelector[k] = v
		}
	}
	if m.Status.StartTime != nil {
		out.Status.StartTime = m.Status.StartTime.DeepCopy()
	}
	if m.Status.CompletionTime != nil {
		out.Status.CompletionTime = m.Status.CompletionTime.DeepCopy()
	}
	if m.Status.Downtime != nil {
		d := *m.Status.Downtime
		out.Status.Downtime = &d
	}
	if m.Status.Conditions != nil {
		out.Status.Conditions = append([]condition.Condition(nil), m.Status.Conditions...)
	}
}

// DeepCopy returns a copy of m.
func (m *PodMigration) DeepCopy() *PodMigration {
	if m == nil {
		return nil
	}
	out := new(PodMigration)
	m.DeepCopyInto(out)
	return out
}

// DeepCopyObject returns a copy of m as a runtime.Object.
func (m *PodMigration) DeepCopyObject() runtime.Object { return m.DeepCopy() }

// PodMigrationList is a list of PodMigrations.
type PodMigrationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []PodMigration `json:"items"`
}

// DeepCopyObject returns a copy of l as a runtime.Object.
func (l *PodMigrationList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &PodMigrationList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]PodMigration, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}
