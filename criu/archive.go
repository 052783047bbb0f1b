package criu

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/criu/archive"
)

// The archive format lives in package archive; these names keep the
// callers of package criu compiling.
const (
	// CheckpointsDir: see archive.CheckpointsDir.
	CheckpointsDir = archive.CheckpointsDir
	// DefaultRootDir: see archive.DefaultRootDir.
	DefaultRootDir = archive.DefaultRootDir
	// ImagesDir: see archive.ImagesDir.
	ImagesDir = archive.ImagesDir
	// ConfigDump: see archive.ConfigDump.
	ConfigDump = archive.ConfigDump
	// SpecDump: see archive.SpecDump.
	SpecDump = archive.SpecDump
	// StatusDump: see archive.StatusDump.
	StatusDump = archive.StatusDump
	// DumpLog: see archive.DumpLog.
	DumpLog = archive.DumpLog
	// StatsDump: see archive.StatsDump.
	StatsDump = archive.StatsDump
	// RestoreLog: see archive.RestoreLog.
	RestoreLog = archive.RestoreLog
	// RootfsDiffTar: see archive.RootfsDiffTar.
	RootfsDiffTar = archive.RootfsDiffTar
	// DeletedFiles: see archive.DeletedFiles.
	DeletedFiles = archive.DeletedFiles
)

// The CRI annotations checkpointctl reads from spec.dump (see package
// archive).
const (
	AnnotationContainerName    = archive.AnnotationContainerName
	AnnotationSandboxName      = archive.AnnotationSandboxName
	AnnotationSandboxNamespace = archive.AnnotationSandboxNamespace
)

// ArchiveName is archive.Name: kubelet's name for a checkpoint of ref
// taken at t, "-attempt" appended for attempt > 0.
func ArchiveName(ref ContainerRef, t time.Time, attempt int) string {
	return archive.Name(ref, t, attempt)
}

// ContainerConfig is config.dump (archive.ContainerConfig).
type ContainerConfig = archive.ContainerConfig

// Spec is spec.dump (archive.Spec).
type Spec = archive.Spec

// SpecProcess is the process part of an OCI spec (archive.SpecProcess).
type SpecProcess = archive.SpecProcess

// metadata returns config.dump, spec.dump and status.dump for t
// checkpointed at at, in that order. config.dump is t.ConfigDump when the
// runtime gave its own, else nodeshim's ContainerConfig; spec.dump is
// t.Spec when set, else the parts of a spec nodeshim knows of a plain
// process. The CRI annotations that name the container are added where
// the spec does not have them. status.dump is t.Status, or what is known
// of the target in a CRI ContainerStatus (see statusOf).
func metadata(t Target, at time.Time) ([]archive.MetaFile, error) {
	config := t.ConfigDump
	if config == nil {
		cfg := ContainerConfig{
			ID:             t.ID,
			Name:           t.Ref.Container,
			Pod:            t.Ref.Pod,
			Namespace:      t.Ref.Namespace,
			Pid:            t.Pid,
			OCIRuntime:     t.Runtime,
			RootfsImage:    t.Image,
			RootfsImageRef: t.ImageRef,
			CreatedTime:    t.Created.UTC(),
			CheckpointedAt: at.UTC(),
		}
		var err error
		if config, err = json.MarshalIndent(cfg, "", "  "); err != nil {
			return nil, fmt.Errorf("encode %s: %w", ConfigDump, err)
		}
	}
	ann := map[string]string{}
	if t.Spec != nil {
		for k, v := range t.Spec.Annotations {
			ann[k] = v
		}
	}
	for k, v := range t.Annotations {
		if _, ok := ann[k]; !ok {
			ann[k] = v
		}
	}
	for k, v := range map[string]string{
		AnnotationContainerName:    t.Ref.Container,
		AnnotationSandboxName:      t.Ref.Pod,
		AnnotationSandboxNamespace: t.Ref.Namespace,
	} {
		if _, ok := ann[k]; !ok {
			ann[k] = v
		}
	}
	var v any
	if t.Spec != nil {
		sp := *t.Spec
		sp.Annotations = ann
		v = sp
	} else {
		sp := Spec{OCIVersion: "1.0.2", Annotations: ann}
		if len(t.Args) > 0 {
			sp.Process = &SpecProcess{Args: t.Args}
		}
		v = sp
	}
	spec, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", SpecDump, err)
	}
	// As containerd writes it: encoding/json of the CRI message.
	status, err := json.Marshal(statusOf(t))
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", StatusDump, err)
	}
	return []archive.MetaFile{{Name: ConfigDump, Data: config}, {Name: SpecDump, Data: spec}, {Name: StatusDump, Data: status}}, nil
}

// statusOf returns t.Status, or else the CRI ContainerStatus of a running
// container built from what t says: its id, name, kubelet's labels, image
// and creation time. containerd's restore takes the restored container's
// name, labels, annotations and image from it.
func statusOf(t Target) *runtimeapi.ContainerStatus {
	if t.Status != nil {
		return t.Status
	}
	created := int64(0)
	if !t.Created.IsZero() {
		created = t.Created.UnixNano()
	}
	return &runtimeapi.ContainerStatus{
		Id:        t.ID,
		Metadata:  &runtimeapi.ContainerMetadata{Name: t.Ref.Container},
		State:     runtimeapi.ContainerState_CONTAINER_RUNNING,
		CreatedAt: created,
		StartedAt: created,
		Image:     &runtimeapi.ImageSpec{Image: t.Image},
		ImageRef:  t.ImageRef,
		Labels: map[string]string{
			archive.LabelPodName:       t.Ref.Pod,
			archive.LabelPodNamespace:  t.Ref.Namespace,
			archive.LabelContainerName: t.Ref.Container,
		},
		Annotations: t.Annotations,
	}
}

// ErrInvalidArchive is archive.ErrInvalid: returned, wrapped, for an
// archive that nodeshim refuses to unpack or restore.
var ErrInvalidArchive = archive.ErrInvalid

// ArchiveEntry is one validated member of a checkpoint archive
// (archive.Entry).
type ArchiveEntry = archive.Entry

// ValidateArchive is archive.Validate: it reads a whole tar stream and
// checks it is a checkpoint archive nodeshim can restore safely.
func ValidateArchive(r io.Reader) ([]ArchiveEntry, error) { return archive.Validate(r) }
