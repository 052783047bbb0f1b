// Package migration is the nodeshim controller's half of PodMigrations:
// it moves one pod to another node with its state, step by step, each
// step recorded in the object's status before the next, so that a
// controller that restarts (or another that wins the election) takes up
// where the last stopped.
//
//  1. Before anything is frozen: the pod must run on a node, must not be
//     a StatefulSet's or a DaemonSet's (their controllers own the pod's
//     name or node), and the target (spec.targetNode, or the first node by
//     name that spec.nodeSelector selects and that qualifies) must carry
//     the capability labels the migration needs (v1alpha1.Label*: CRIU,
//     the restoring RuntimeClass, the source's architecture, and pre-copy
//     or lazy pages on both nodes for those modes). A refusal names the
//     missing label; nothing is created.
//  2. A PodCheckpoint of the pod, owned by the PodMigration: the source
//     node's reporter takes it (cluster/podcheckpoint) and its shim
//     stores the pod checkpoint.
//  3. The pod checkpoint is sent from the source's shim to the target's
//     (shim/transfer): the source node's reporter has its shim send it
//     (cluster/migrationsend) and records the Transferred condition; the
//     controller, which holds no node's certificate or key, waits for it.
//  4. The restored Pod is created on the target under the restoring
//     RuntimeClass (cluster/kubectl.NewPod: the pod's labels,
//     annotations and spec as checkpointed), named after the original
//     with a suffix of the migration, with the original's owner
//     references when its controller is a ReplicaSet (whose original is
//     given the lowest pod-deletion-cost, so that the ReplicaSet scales
//     the original away, not the restored pod).
//  5. Once it runs, the downtime is recorded and the original deleted
//     when spec.deleteOriginal asks (by uid: never a pod of the same name
//     made since).
//
// A failure at any step leaves the original pod running and the
// PodMigration Failed with the step's condition False and why.
package migration
