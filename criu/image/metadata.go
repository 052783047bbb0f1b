package image

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/criu/archive"
)

// maxMetadata bounds config.dump as read into memory.
const maxMetadata = 1 << 20

// metadata is what a checkpoint image says of its container: the fields
// of config.dump that podman's (libpod ContainerConfig) and nodeshim's
// (archive.ContainerConfig) records share or name differently.
type metadata struct {
	ID              string    `json:"id"`
	Name            string    `json:"name"`
	Pod             string    `json:"pod"`
	Namespace       string    `json:"namespace"`
	CreatedTime     time.Time `json:"createdTime"`
	Runtime         string    `json:"runtime"`
	RootfsImage     string    `json:"rootfsImage"`
	RootfsImageName string    `json:"rootfsImageName"`
	RootfsImageID   string    `json:"rootfsImageID"`
	RootfsImageRef  string    `json:"rootfsImageRef"`
	RawImageName    string    `json:"rawImageName"`
	CheckpointedAt  time.Time `json:"checkpointedTime"`

	// portableConfig is config.dump for the layer (see portable).
	portableConfig []byte
}

// nodePaths are the keys of podman's config.dump (libpod
// ContainerConfig) that hold paths in the storage of the node the
// checkpoint was taken on. podman fills each one in again for its own
// storage when it is empty (libpod setupContainer), so a checkpoint image
// leaves them out: kept, they would send the restored container's conmon
// pid file, log and shm to directories that do not exist on another node
// with other storage paths.
var nodePaths = []string{"staticDir", "conmonPidFile", "pid_file", "ShmDir", "logPath", "secretsPath"}

// portable returns config.dump without nodePaths, re-encoded with sorted
// keys (deterministic), or unchanged when it has none of them.
func portable(config []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(config, &m); err != nil {
		return nil, err
	}
	changed := false
	for _, k := range nodePaths {
		if _, ok := m[k]; ok {
			delete(m, k)
			changed = true
		}
	}
	if !changed {
		return config, nil
	}
	return json.Marshal(m)
}

// readMetadata reads config.dump from the archive.
func readMetadata(r io.Reader) (metadata, error) {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return metadata{}, fmt.Errorf("checkpoint image: no %s: %w", archive.ConfigDump, ErrNotCheckpoint)
		}
		if err != nil {
			return metadata{}, fmt.Errorf("checkpoint image: read archive: %w", err)
		}
		if h.Name != archive.ConfigDump && h.Name != "./"+archive.ConfigDump {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(tr, maxMetadata+1))
		if err != nil {
			return metadata{}, fmt.Errorf("checkpoint image: read %s: %w", archive.ConfigDump, err)
		}
		if len(b) > maxMetadata {
			return metadata{}, fmt.Errorf("checkpoint image: %s larger than %d bytes: %w", archive.ConfigDump, maxMetadata, ErrNotCheckpoint)
		}
		var m metadata
		if err := json.Unmarshal(b, &m); err != nil {
			return metadata{}, fmt.Errorf("checkpoint image: %s: %w: %w", archive.ConfigDump, err, ErrNotCheckpoint)
		}
		if m.portableConfig, err = portable(b); err != nil {
			return metadata{}, fmt.Errorf("checkpoint image: %s: %w: %w", archive.ConfigDump, err, ErrNotCheckpoint)
		}
		if m.Name == "" {
			return metadata{}, fmt.Errorf("checkpoint image: %s names no container: %w", archive.ConfigDump, ErrNotCheckpoint)
		}
		if err := m.check(); err != nil {
			return metadata{}, fmt.Errorf("checkpoint image: %w", err)
		}
		return m, nil
	}
}

// check checks every value of m that becomes an annotation or a field of
// status.dump against its grammar (package archive's checks), so that
// nothing an archive says reaches a runtime unchecked.
func (m metadata) check() error {
	for _, f := range []struct{ what, v string }{{"id", m.ID}, {"name", m.Name}, {"pod", m.Pod}, {"namespace", m.Namespace}} {
		if f.v != "" {
			if err := archive.CheckName(archive.ConfigDump, f.what, f.v); err != nil {
				return err
			}
		}
	}
	if m.Runtime != "" {
		if err := archive.CheckRuntime(archive.ConfigDump, m.Runtime); err != nil {
			return err
		}
	}
	for _, f := range []struct{ what, v string }{
		{"rootfsImage", m.RootfsImage}, {"rootfsImageName", m.RootfsImageName}, {"rootfsImageID", m.RootfsImageID},
		{"rootfsImageRef", m.RootfsImageRef}, {"rawImageName", m.RawImageName},
	} {
		if f.v != "" {
			if err := archive.CheckImageRef(archive.ConfigDump, f.what, f.v); err != nil {
				return err
			}
		}
	}
	return nil
}

// status is the status.dump of a layer whose archive has none (podman's,
// or nodeshim's before it wrote one): the CRI ContainerStatus containerd's
// restore reads the container's name, kubelet's labels and image from,
// built from config.dump, encoded as containerd encodes it.
func (m metadata) status() ([]byte, error) {
	imageName := m.RootfsImageName
	if imageName == "" {
		imageName = m.RootfsImage
	}
	imageRef := m.RootfsImageRef
	if imageRef == "" {
		imageRef = m.RootfsImageID
	}
	var created int64
	if !m.CreatedTime.IsZero() {
		created = m.CreatedTime.UnixNano()
	}
	labels := map[string]string{labelContainerName: m.Name}
	if m.Pod != "" {
		labels[labelPodName] = m.Pod
	}
	if m.Namespace != "" {
		labels[labelPodNamespace] = m.Namespace
	}
	b, err := json.Marshal(&runtimeapi.ContainerStatus{
		Id:        m.ID,
		Metadata:  &runtimeapi.ContainerMetadata{Name: m.Name},
		State:     runtimeapi.ContainerState_CONTAINER_RUNNING,
		CreatedAt: created,
		StartedAt: created,
		Image:     &runtimeapi.ImageSpec{Image: imageName},
		ImageRef:  imageRef,
		Labels:    labels,
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint image: encode %s: %w", archive.StatusDump, err)
	}
	return b, nil
}

// kubelet's labels on a container (pkg/kubelet/types/labels.go).
const (
	labelPodName       = archive.LabelPodName
	labelPodNamespace  = archive.LabelPodNamespace
	labelContainerName = archive.LabelContainerName
)

// annotations are the manifest's: each runtime's checkpoint marker and
// what it reads of the original container.
func (m metadata) annotations(ref string) map[string]string {
	imageName := m.RootfsImageName
	if imageName == "" {
		imageName = m.RootfsImage
	}
	rawName := m.RawImageName
	if rawName == "" {
		rawName = imageName
	}
	imageID := m.RootfsImageID
	if imageID == "" {
		imageID = m.RootfsImageRef
	}
	runtimeName := m.Runtime
	if runtimeName == "" || runtimeName == "cri" || runtimeName == "host" {
		runtimeName = "runc" // nodeshim dumps containers as runc does
	}
	ann := map[string]string{
		PodmanName:                m.Name,
		PodmanRuntimeName:         runtimeName,
		PodmanHostArch:            runtime.GOARCH,
		CRIOName:                  m.Name,
		CRIUName:                  m.Name,
		ocispec.AnnotationRefName: ref,
	}
	for k, v := range map[string]string{
		PodmanRawImageName: rawName, PodmanRootfsImageName: imageName, PodmanRootfsImageID: imageID,
		CRIURootfsImageName: imageName,
	} {
		if v != "" {
			ann[k] = v
		}
	}
	if !m.CheckpointedAt.IsZero() {
		ann[ocispec.AnnotationCreated] = m.CheckpointedAt.UTC().Format(time.RFC3339)
	}
	return ann
}
