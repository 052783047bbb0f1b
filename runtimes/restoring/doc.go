// Package restoring is the runc-compatible OCI runtime of nodeshim's
// RuntimeClass (cmd/nodeshim-runc): containerd's runc shim
// (io.containerd.runc.v2) runs it as the runtime handler's BinaryName with
// runc's command line, and it passes every call to the real runtime (runc
// or crun) with exec(2), so that nothing stays in between. Only the create
// of a container whose OCI spec carries AnnotationCheckpoint is different:
// the front execs the restoring binary (cmd/nodeshim-runc-restore,
// package restoring/restore), which restores the container from its
// checkpoint with `runc restore --detach`, and the shim's later start of
// it is answered from a marker in the runtime's state directory.
//
// The front imports nothing but the standard library: it runs before
// every runtime call on the node, and Go runs every imported package's
// init at each start, so the archive code (and the protobuf and gRPC
// packages under it) stays in the restoring binary.
package restoring

import "time"

// AnnotationCheckpoint names the checkpoint a container restores from:
// a pod annotation that the runtime handler passes into the OCI spec of
// every container of the pod (pod_annotations). Its value is the name of
// an archive in the checkpoint directory (Config.CheckpointDir), or its
// absolute path there.
const AnnotationCheckpoint = "restore.nodeshim.io/checkpoint"

// MarkerName is the file kept in the runtime's state directory of a
// container that was restored (<root>/<id>/), so that the shim's later
// start is answered: the restored process already runs. The front
// removes it before the runtime's delete.
const MarkerName = "nodeshim-restored.json"

// Marker is the content of MarkerName.
type Marker struct {
	Checkpoint string    `json:"checkpoint"`
	RestoredAt time.Time `json:"restoredAt"`
	Pid        int       `json:"pid"`
}
