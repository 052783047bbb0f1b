package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodeshim/nodeshim/condition"
)

// GroupName and Version name this API group version.
const (
	GroupName = "nodeshim.io"
	Version   = "v1alpha1"
)

// GroupVersion returns nodeshim.io/v1alpha1.
func GroupVersion() schema.GroupVersion {
	return schema.GroupVersion{Group: GroupName, Version: Version}
}

// AddToScheme registers the types of this group version with s.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion(), &PodCheckpoint{}, &PodCheckpointList{}, &PodMigration{}, &PodMigrationList{})
	metav1.AddToGroupVersion(s, GroupVersion())
	return nil
}

// FinalizerCheckpointFiles is set on a PodCheckpoint once its node has
// claimed it, and removed once the node has removed what the checkpoint
// produced, so that deleting the object deletes the files.
const FinalizerCheckpointFiles = "nodeshim.io/checkpoint-files"

// FinalizerTransferredFiles is set on a PodMigration by its source node's
// reporter before the pod checkpoint is sent, and removed by its target
// node's reporter once that node's shim has removed the copy it stored,
// so that deleting the migration deletes the files on the target too (the
// source's go with the PodCheckpoint the migration owns).
const FinalizerTransferredFiles = "nodeshim.io/transferred-files"

// Phase is where a PodCheckpoint stands.
type Phase string

// The phases of a PodCheckpoint, in order; Failed may follow any but
// Stored.
const (
	// PhasePending: no node has claimed the object yet (its pod is not
	// scheduled, or its node's reporter has not seen it).
	PhasePending Phase = ""
	// PhaseAccepted: the pod's node claimed it and asked its shim.
	PhaseAccepted Phase = "Accepted"
	// PhaseStored: the pod checkpoint is on the node (and its images
	// built when asked for).
	PhaseStored Phase = "Stored"
	// PhaseFailed: it failed; the Stored condition says why. Nothing of
	// it is left on the node, and the pod runs on.
	PhaseFailed Phase = "Failed"
)

// The condition types of a PodCheckpoint's status (condition.Condition:
// nodeshim's one condition model, with a severity while abnormal).
const (
	// ConditionAccepted is True once the pod's node has claimed the
	// object, False when it refused it (the pod is gone, checkpoints are
	// off on that node).
	ConditionAccepted = "Accepted"
	// ConditionStored is True once the checkpoint is stored on the node,
	// False when it failed.
	ConditionStored = "Stored"
	// ConditionReady summarises the others (condition.Summarize).
	ConditionReady = condition.TypeReady
)

// PodCheckpoint asks for a checkpoint of one pod of its namespace, taken
// on the node the pod runs on, with all its containers frozen at one
// instant.
type PodCheckpoint struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PodCheckpointSpec   `json:"spec"`
	Status PodCheckpointStatus `json:"status,omitempty"`
}

// PodCheckpointSpec is what a PodCheckpoint asks for.
type PodCheckpointSpec struct {
	// PodName names the pod, in the object's namespace.
	PodName string `json:"podName"`
	// Image, when set, asks for one OCI checkpoint image per container
	// too, named from this repository (e.g. "registry.local/ckpt/web").
	Image string `json:"image,omitempty"`
	// Timeout bounds the checkpoint on the node; unset takes the node's
	// default. For a Lazy one it bounds the serving of the memory too.
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// Lazy leaves the pod's memory out of the checkpoint: the node keeps
	// the pod frozen and serves each container's memory from a page
	// server over mutual TLS (its node certificate) to the one restore
	// that fetches it, on its page faults first; once all of it is
	// fetched the containers end, as they run on over there. A PodMigration
	// of mode Lazy sets it. Deleting the PodCheckpoint, or its timeout
	// passing, before the memory is fetched gives the pod back: thawed,
	// running on. Not with Image.
	Lazy bool `json:"lazy,omitempty"`
}

// PodCheckpointStatus is what became of a PodCheckpoint.
type PodCheckpointStatus struct {
	// ObservedGeneration is the generation of the spec this status is of.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase is where it stands.
	Phase Phase `json:"phase,omitempty"`
	// NodeName is the node that claimed it: the pod's node then.
	NodeName string `json:"nodeName,omitempty"`
	// PodUID is the uid of the pod checkpointed.
	PodUID string `json:"podUID,omitempty"`
	// Location is the pod checkpoint's path on that node.
	Location string `json:"location,omitempty"`
	// StartTime and CompletionTime bound the work on the node.
	StartTime      *metav1.Time `json:"startTime,omitempty"`
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// Pod is the pod as it was checkpointed (its labels, annotations and
	// spec), from which a restore makes the new Pod.
	Pod *corev1.PodTemplateSpec `json:"pod,omitempty"`
	// Conditions are Accepted, Stored and their Ready summary.
	Conditions []condition.Condition `json:"conditions,omitempty"`
}

// DeepCopyInto copies c into out.
func (c *PodCheckpoint) DeepCopyInto(out *PodCheckpoint) {
	*out = *c
	out.TypeMeta = c.TypeMeta
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if c.Spec.Timeout != nil {
		d := *c.Spec.Timeout
		out.Spec.Timeout = &d
	}
	if c.Status.StartTime != nil {
		out.Status.StartTime = c.Status.StartTime.DeepCopy()
	}
	if c.Status.CompletionTime != nil {
		out.Status.CompletionTime = c.Status.CompletionTime.DeepCopy()
	}
	if c.Status.Pod != nil {
		out.Status.Pod = c.Status.Pod.DeepCopy()
	}
	if c.Status.Conditions != nil {
		out.Status.Conditions = append([]condition.Condition(nil), c.Status.Conditions...)
	}
}

// DeepCopy returns a copy of c.
func (c *PodCheckpoint) DeepCopy() *PodCheckpoint {
	if c == nil {
		return nil
	}
	out := new(PodCheckpoint)
	c.DeepCopyInto(out)
	return out
}

// DeepCopyObject returns a copy of c as a runtime.Object.
func (c *PodCheckpoint) DeepCopyObject() runtime.Object { return c.DeepCopy() }

// PodCheckpointList is a list of PodCheckpoints.
type PodCheckpointList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []PodCheckpoint `json:"items"`
}

// DeepCopyObject returns a copy of l as a runtime.Object.
func (l *PodCheckpointList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &PodCheckpointList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]PodCheckpoint, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}
