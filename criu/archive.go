package criu

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
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
)

// The CRI annotations checkpointctl reads from spec.dump.
const (
	AnnotationContainerName    = "io.kubernetes.cri.container-name"
	AnnotationSandboxName      = "io.kubernetes.cri.sandbox-name"
	AnnotationSandboxNamespace = "io.kubernetes.cri.sandbox-namespace"
)

// ArchiveName returns kubelet's name for a checkpoint of ref taken at t,
// "checkpoint-<pod>_<namespace>-<container>-<RFC3339 time>.tar", with the
// time in UTC. attempt 0 gives kubelet's name; attempt n > 0 appends "-n"
// after the timestamp, which is how nodeshim keeps two checkpoints of one
// container in the same second apart without overwriting either (kubelet's
// own name would collide).
func ArchiveName(ref ContainerRef, t time.Time, attempt int) string {
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

// metaFile is one metadata member at the archive's root.
type metaFile struct {
	name string
	data []byte
}

// metadata returns config.dump, spec.dump and status.dump for t
// checkpointed at at, in that order. config.dump is t.ConfigDump when the
// runtime gave its own, else nodeshim's ContainerConfig; spec.dump is
// t.Spec when set, else the parts of a spec nodeshim knows of a plain
// process. The CRI annotations that name the container are added where
// the spec does not have them. status.dump is t.Status, or what is known
// of the target in a CRI ContainerStatus (see statusOf).
func metadata(t Target, at time.Time) ([]metaFile, error) {
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
	return []metaFile{{ConfigDump, config}, {SpecDump, spec}, {StatusDump, status}}, nil
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
			labelPodName:       t.Ref.Pod,
			labelPodNamespace:  t.Ref.Namespace,
			labelContainerName: t.Ref.Container,
		},
		Annotations: t.Annotations,
	}
}

// kubelet's labels on a container (pkg/kubelet/types/labels.go).
const (
	labelPodName       = "io.kubernetes.pod.name"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelContainerName = "io.kubernetes.container.name"
)

// ErrInvalidArchive is returned, wrapped, for an archive that nodeshim
// refuses to unpack or restore.
var ErrInvalidArchive = errors.New("invalid checkpoint archive")

// Limits on what ValidateArchive accepts, so that a hostile archive cannot
// exhaust memory or inodes before restore starts.
const (
	maxEntries = 1 << 16
	maxNameLen = 4096
)

// ArchiveEntry is one validated member of a checkpoint archive.
type ArchiveEntry struct {
	Name     string
	Type     byte
	Size     int64
	Linkname string
}

// ValidateArchive reads a whole tar stream and checks it is a checkpoint
// archive nodeshim can restore safely: only directories, regular files and
// symlinks that stay inside the archive; no absolute names, no "..", no
// duplicates; a checkpoint/ directory with inventory.img, and config.dump
// and spec.dump at the root. It returns the entries in archive order.
func ValidateArchive(r io.Reader) ([]ArchiveEntry, error) {
	tr := tar.NewReader(r)
	seen := map[string]byte{}
	var entries []ArchiveEntry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: read tar: %w", ErrInvalidArchive, err)
		}
		if len(entries) >= maxEntries {
			return nil, fmt.Errorf("%w: more than %d entries", ErrInvalidArchive, maxEntries)
		}
		name, err := cleanEntryName(h.Name)
		if err != nil {
			return nil, err
		}
		if _, dup := seen[name]; dup {
			return nil, fmt.Errorf("%w: entry %q appears twice", ErrInvalidArchive, h.Name)
		}
		e := ArchiveEntry{Name: name, Type: h.Typeflag, Size: h.Size}
		switch h.Typeflag {
		case tar.TypeDir:
		case tar.TypeReg:
			if h.Size < 0 {
				return nil, fmt.Errorf("%w: entry %q has size %d", ErrInvalidArchive, h.Name, h.Size)
			}
		case tar.TypeSymlink:
			if err := checkSymlink(name, h.Linkname); err != nil {
				return nil, err
			}
			e.Linkname = h.Linkname
		default:
			return nil, fmt.Errorf("%w: entry %q has type %q; only directories, regular files and symlinks are allowed", ErrInvalidArchive, h.Name, h.Typeflag)
		}
		// Every parent must be a directory this archive created or an
		// implicit one, never a symlink: writing through a symlinked
		// parent is how archives escape.
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if t, ok := seen[dir]; ok && t != tar.TypeDir {
				return nil, fmt.Errorf("%w: entry %q lies under %q, which is not a directory", ErrInvalidArchive, h.Name, dir)
			}
		}
		seen[name] = h.Typeflag
		entries = append(entries, e)
	}
	if t, ok := seen[ImagesDir]; !ok || t != tar.TypeDir {
		return nil, fmt.Errorf("%w: no %s/ directory entry", ErrInvalidArchive, ImagesDir)
	}
	for _, f := range []string{ConfigDump, SpecDump, ImagesDir + "/inventory.img"} {
		if t, ok := seen[f]; !ok || t != tar.TypeReg {
			return nil, fmt.Errorf("%w: no regular file %s", ErrInvalidArchive, f)
		}
	}
	return entries, nil
}

// cleanEntryName returns the archive-relative name of a tar entry, refusing
// absolute names and "..". A leading "./" is accepted (tar writes it).
func cleanEntryName(name string) (string, error) {
	if len(name) > maxNameLen {
		return "", fmt.Errorf("%w: entry name of %d bytes", ErrInvalidArchive, len(name))
	}
	if name == "" || strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("%w: empty or NUL-bearing entry name %q", ErrInvalidArchive, name)
	}
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("%w: entry %q has an absolute path", ErrInvalidArchive, name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", fmt.Errorf("%w: entry %q contains \"..\"", ErrInvalidArchive, name)
		}
	}
	clean := path.Clean(strings.TrimPrefix(name, "./"))
	if clean == "." || clean == "" {
		return "", fmt.Errorf("%w: entry %q names the archive root", ErrInvalidArchive, name)
	}
	return clean, nil
}

// checkSymlink refuses a symlink whose target is absolute or leaves the
// archive once resolved relative to the link's directory.
func checkSymlink(name, target string) error {
	if target == "" || strings.HasPrefix(target, "/") {
		return fmt.Errorf("%w: symlink %q points to %q, outside the archive", ErrInvalidArchive, name, target)
	}
	depth := strings.Count(name, "/") // directories above the link
	for _, part := range strings.Split(target, "/") {
		switch part {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return fmt.Errorf("%w: symlink %q points to %q, outside the archive", ErrInvalidArchive, name, target)
			}
		default:
			depth++
		}
	}
	return nil
}
