// Package v1alpha1 is nodeshim's API group nodeshim.io at version v1alpha1:
// the cluster objects through which a cluster user asks for what the
// node's shim does, without reaching the node.
//
// A PodCheckpoint names a pod of its namespace; the reporter of the node
// the pod runs on (it holds the credentials; the shim holds the
// privilege) claims it, asks its shim over the node socket for one pod
// checkpoint, and records the phases, the result and its conditions in
// the object's status. Who may checkpoint which pods is RBAC on the
// object, so the API server's authorization and audit log decide, not a
// check of nodeshim's own. Deleting the object removes the checkpoint from
// the node, through the shim's retention (the finalizer
// FinalizerCheckpointFiles holds the object until then).
//
// The CustomResourceDefinition is deploy/crd-podcheckpoint.yaml; its schema
// is checked against these types by the tests.
package v1alpha1
