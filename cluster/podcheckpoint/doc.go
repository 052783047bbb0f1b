// Package podcheckpoint is the reporter's half of the PodCheckpoint objects
// (cluster/apis/v1alpha1): it watches them, claims those whose pod runs on
// its node, asks its shim over the node socket for one pod checkpoint,
// and writes what became of it into the object's status; when an object
// it claimed is deleted, it asks the shim to remove the checkpoint and
// then lets the object go.
//
// The reporter holds the API credentials and the shim the privilege: the
// shim never talks to the API server, and the reporter never touches the
// node's files. Who may ask for which pod's checkpoint is the API
// server's RBAC on podcheckpoints in the pod's namespace.
//
// The phases are Pending (no node claimed it: the pod is not scheduled,
// or does not exist), Accepted (the node claimed it: a finalizer is set
// first, so that no checkpoint is ever made for an object already gone),
// then Stored or Failed. An object found Accepted when the handler starts
// (the reporter restarted in the middle) is marked Failed with reason
// Interrupted: its outcome on the node is unknown, and the node's
// retention removes what a checkpoint leaves. Its conditions are
// Accepted, Stored and their Ready summary, in nodeshim's one condition
// model (package condition), with observedGeneration.
package podcheckpoint
