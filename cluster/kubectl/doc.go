// Package kubectl is `kubectl nodeshim`, the kubectl plugin through which a
// cluster user checkpoints a pod, lists the checkpoints, restores one
// into a new Pod and deletes one, without writing a PodCheckpoint by
// hand and without reaching a node:
//
//	kubectl nodeshim checkpoint POD [-n NS] [--name NAME] [--image REPO] [--timeout 1m] [--wait=true]
//	kubectl nodeshim get [NAME] [-n NS]
//	kubectl nodeshim restore NAME [-n NS] [--pod NEWPOD] [--runtime-class nodeshim]
//	kubectl nodeshim delete NAME [-n NS]
//
// It speaks only to the API server, with the user's kubeconfig and
// rights (RBAC on podcheckpoints and pods): the reporter of the pod's node
// does the rest (cluster/podcheckpoint). A restore creates a Pod from the
// pod as it was checkpointed, on the node that holds the checkpoint,
// under the restoring RuntimeClass (runtimes/restoring), with the
// checkpoint named in its restore.nodeshim.io/checkpoint annotation.
// cmd/kubectl-nodeshim is the binary, installed on PATH as krew installs
// plugins.
package kubectl
