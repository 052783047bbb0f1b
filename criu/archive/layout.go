package archive

import (
	"github.com/nodeshim/nodeshim/internal/ref"

	"fmt"
	"time"
)

// The fixed parts of a checkpoint archive, as kubelet, CRI-O and
// checkpointctl name them.
const (
	// CheckpointsDir is the directory under kubelet's root dir that holds
	// the archives.
	CheckpointsDir = "checkpoints"
	// DefaultRootDir is kubelet's default --root-dir.
	DefaultRootDir = "/var/lib/kubelet"
	// ImagesDir is the archive's directory of CRIU images.
	ImagesDir = "checkpoint"
	// Inventory is CRIU's inventory image, which every dump has.
	Inventory = ImagesDir + "/inventory.img"
	// ConfigDump is the container's metadata (checkpointctl's ContainerConfig).
	ConfigDump = "config.dump"
	// SpecDump is the container's OCI spec with its CRI annotations.
	SpecDump = "spec.dump"
	// StatusDump is the container's CRI ContainerStatus as JSON
	// (checkpointctl's StatusDumpFile): containerd 2.x's CRI writes it on
	// checkpoint and reads it back to restore a container through
	// CreateContainer (name, labels, annotations, image).
	StatusDump = "status.dump"
	// DumpLog is CRIU's log of the dump.
	DumpLog = "dump.log"
	// StatsDump is CRIU's dump statistics (stats.proto).
	StatsDump = "stats-dump"
	// RestoreLog is CRIU's log of a restore, in the restore work directory.
	RestoreLog = "restore.log"
	// RootfsDiffTar holds the files the container added or changed, as an
	// uncompressed tar relative to the container's root (checkpointctl's
	// RootFsDiffTar).
	RootfsDiffTar = "rootfs-diff.tar"
	// DeletedFiles is a JSON list of the absolute paths the container
	// deleted from its image (checkpointctl's DeletedFilesFile).
	DeletedFiles = "deleted.files"
)

// The CRI annotations checkpointctl reads from spec.dump.
const (
	AnnotationContainerName    = "io.kubernetes.cri.container-name"
	AnnotationSandboxName      = "io.kubernetes.cri.sandbox-name"
	AnnotationSandboxNamespace = "io.kubernetes.cri.sandbox-namespace"
)

// kubelet's labels on a container (pkg/kubelet/types/labels.go).
const (
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelContainerName = "io.kubernetes.container.name"
)

// ContainerRef names a Kubernetes container the way kubelet's Checkpoint API
// does: /checkpoint/{namespace}/{pod}/{container}. It is nodeshim's one
// container reference, ref.Container.
type ContainerRef = ref.Container

// Name returns kubelet's name for a checkpoint of ref taken at t,
// "checkpoint-<pod>_<namespace>-<container>-<RFC3339 time>.tar", with the
// time in UTC. attempt 0 gives kubelet's name; attempt n > 0 appends "-n"
// after the timestamp, which is how nodeshim keeps two checkpoints of one
// container in the same second apart without overwriting either (kubelet's
// own name would collide).
func Name(ref ContainerRef, t time.Time, attempt int) string {
	ts := t.UTC().Format(time.RFC3339)
	if attempt > 0 {
		return fmt.Sprintf("checkpoint-%s_%s-%s-%s-%d.tar", ref.Pod, ref.Namespace, ref.Container, ts, attempt)
	}
	return fmt.Sprintf("checkpoint-%s_%s-%s-%s.tar", ref.Pod, ref.Namespace, ref.Container, ts)
}

// ContainerConfig is config.dump: checkpointctl's ContainerConfig fields
// plus the pod and namespace.
type ContainerConfig struct {
	ID             string    `json:"id"`
	Name           string    `json:"name"`
	Pod            string    `json:"pod"`
	Namespace      string    `json:"namespace"`
	Pid            int       `json:"pid"`
	OCIRuntime     string    `json:"runtime"`
	RootfsImage    string    `json:"rootfsImageName,omitempty"`
	RootfsImageRef string    `json:"rootfsImageRef,omitempty"`
	CreatedTime    time.Time `json:"createdTime"`
	CheckpointedAt time.Time `json:"checkpointedTime"`
	Restored       bool      `json:"restored"`
}

// Spec is spec.dump: the parts of an OCI runtime spec that describe the
// target and the CRI annotations that name it.
type Spec struct {
	OCIVersion  string            `json:"ociVersion"`
	Process     *SpecProcess      `json:"process,omitempty"`
	Hostname    string            `json:"hostname,omitempty"`
	Annotations map[string]string `json:"annotations"`
}

// SpecProcess is the process part of an OCI spec.
type SpecProcess struct {
	Args []string `json:"args,omitempty"`
}
