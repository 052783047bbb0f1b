// Package pod checkpoints a Kubernetes pod as one unit: it freezes the
// pod's cgroup once, dumps each running container of the pod with CRIU
// (criu.Checkpoint) while the whole pod stays frozen, thaws it once, and
// publishes one pod checkpoint: a directory that holds a manifest
// (manifest.json: the pod, its containers in order, the init containers
// that are done, the sandbox settings a restore must match) and one
// ordinary container checkpoint archive per container (the format of
// criu/archive, kubelet's archive names), so that each container can also
// be restored alone. docs/pod-checkpoints.md describes the layout.
//
// The names follow KEP-5823 (pod-level checkpoint/restore, CRI
// CheckpointPod) where it defines them: a checkpoint of a pod sandbox
// holds the sandbox's configuration (the CRI PodSandboxConfig), the pod's
// UID, namespace, labels and annotations, and the status of every
// container, the completed ones included.
package pod

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/archive"
	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// ManifestFile is the manifest's name inside a pod checkpoint.
const ManifestFile = "manifest.json"

// Kind and Version identify a pod checkpoint's manifest.
const (
	Kind    = "nodeshim.io/pod-checkpoint"
	Version = 1
)

// maxManifest bounds the manifest ReadManifest reads: a pod's
// PodSandboxConfig and a few hundred containers fit many times over.
const maxManifest = 4 << 20

// ErrInvalid is wrapped by every error about a pod checkpoint nodeshim
// refuses to read (class errdefs.ErrInvalidArgument).
var ErrInvalid = errdefs.New(errdefs.ErrInvalidArgument, "invalid pod checkpoint")

// Manifest is manifest.json: what a pod checkpoint holds and what a
// restore must match.
type Manifest struct {
	// Kind is Kind and Version is Version.
	Kind    string `json:"kind"`
	Version int    `json:"version"`

	// Namespace, Name and UID identify the pod; SandboxID is the
	// runtime's id of its sandbox when it was checkpointed.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	SandboxID string `json:"sandboxID,omitempty"`

	// Sandbox holds the sandbox settings a restore must match.
	Sandbox Sandbox `json:"sandbox"`

	// Containers are the containers dumped, in the pod's order (the
	// order the runtime created them).
	Containers []Container `json:"containers"`
	// InitContainers are the init containers that had finished: recorded,
	// not dumped (a restore does not run them again).
	InitContainers []InitContainer `json:"initContainers,omitempty"`

	// CheckpointedAt is when the checkpoint started; FrozenAt and ThawedAt
	// bound the one interval in which the whole pod was frozen, and every
	// container's dump lies within it. In a lazy pod checkpoint ThawedAt
	// is when every page server was ready and the manifest was written:
	// from then on the pod runs where it is restored (DumpFinishedAt is
	// when the container's archive was written).
	CheckpointedAt time.Time `json:"checkpointedAt"`
	FrozenAt       time.Time `json:"frozenAt"`
	ThawedAt       time.Time `json:"thawedAt"`
}

// Sandbox is what a restore must match of the node and the pod sandbox.
type Sandbox struct {
	// Hostname is the pod's hostname (its UTS namespace).
	Hostname string `json:"hostname,omitempty"`
	// Namespaces are the CRI namespace modes of the pod: POD, CONTAINER,
	// NODE or TARGET for network, pid and ipc.
	Namespaces NamespaceOptions `json:"namespaces"`
	// RuntimeHandler is the CRI runtime handler (the RuntimeClass's
	// handler) the sandbox ran under; empty is the runtime's default.
	RuntimeHandler string `json:"runtimeHandler,omitempty"`
	// CgroupParent is the pod's cgroup as the sandbox config names it.
	CgroupParent string `json:"cgroupParent,omitempty"`
	// Architecture is the node's CPU architecture (Go's GOARCH names).
	Architecture string `json:"architecture"`
	// Kernel is the node's kernel release (uname -r).
	Kernel string `json:"kernel"`
	// CRIUVersion is the version of the criu that dumped the containers.
	CRIUVersion string `json:"criuVersion"`
	// Config is the CRI PodSandboxConfig as the runtime reported it
	// (labels, annotations, DNS, port mappings, security context), or
	// null when the runtime gives none.
	Config json.RawMessage `json:"config,omitempty"`
}

// NamespaceOptions are a pod's CRI namespace modes.
type NamespaceOptions struct {
	Network string `json:"network,omitempty"`
	PID     string `json:"pid,omitempty"`
	IPC     string `json:"ipc,omitempty"`
}

// Container is one dumped container of a pod checkpoint.
type Container struct {
	// Name is the container's name in the pod; ID the runtime's id.
	Name string `json:"name"`
	ID   string `json:"id,omitempty"`
	// Image and ImageRef are the container's image as the runtime names
	// it and its resolved reference.
	Image    string `json:"image,omitempty"`
	ImageRef string `json:"imageRef,omitempty"`
	// Archive is the file name of its container checkpoint archive in
	// the pod checkpoint directory.
	Archive string `json:"archive"`
	// Size is the archive's size in bytes.
	Size int64 `json:"size"`
	// DumpStartedAt and DumpFinishedAt bound CRIU's dump of it.
	DumpStartedAt  time.Time `json:"dumpStartedAt"`
	DumpFinishedAt time.Time `json:"dumpFinishedAt"`
	// CheckpointImage, when the checkpoint was asked for images, is the
	// file name of its OCI checkpoint image archive in the pod checkpoint
	// directory, and CheckpointImageRef the image's name.
	CheckpointImage    string `json:"checkpointImage,omitempty"`
	CheckpointImageRef string `json:"checkpointImageRef,omitempty"`
	// PageServer, in a lazy pod checkpoint (Options.Lazy), is the
	// HOST:PORT (criu.PageServer.String) of the page server that serves
	// this container's memory: its archive holds every image but the
	// memory, which a restore fetches from there
	// (criu.RestoreOptions.LazyFrom). Empty in an ordinary checkpoint.
	PageServer string `json:"pageServer,omitempty"`
}

// InitContainer is an init container that had finished.
type InitContainer struct {
	Name       string    `json:"name"`
	ID         string    `json:"id,omitempty"`
	Image      string    `json:"image,omitempty"`
	ExitCode   int32     `json:"exitCode"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
}

// Name returns the name of a pod checkpoint of namespace/pod taken at t:
// "checkpoint-<pod>_<namespace>-<RFC3339 UTC time>", as kubelet names a
// container's archive without the container and without ".tar" (a pod
// checkpoint is a directory); attempt n > 0 appends "-n".
func Name(namespace, pod string, t time.Time, attempt int) string {
	n := fmt.Sprintf("checkpoint-%s_%s-%s", pod, namespace, t.UTC().Format(time.RFC3339))
	if attempt > 0 {
		n += fmt.Sprintf("-%d", attempt)
	}
	return n
}

// nameRE matches Name's results.
var nameRE = regexp.MustCompile(`^checkpoint-([^_/]+)_([^/]+)-(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)(?:-([1-9]\d{0,5}))?$`)

// ParseName returns the namespace, pod and time of a pod checkpoint's
// name, and false for any other name (a container archive, work entries).
func ParseName(name string) (namespace, pod string, at time.Time, attempt int, ok bool) {
	m := nameRE.FindStringSubmatch(name)
	if m == nil {
		return "", "", time.Time{}, 0, false
	}
	at, err := time.Parse(time.RFC3339, m[3])
	if err != nil {
		return "", "", time.Time{}, 0, false
	}
	for _, c := range m[4] {
		attempt = attempt*10 + int(c-'0')
	}
	return m[2], m[1], at, attempt, true
}

// ReadManifest reads and checks the manifest of the pod checkpoint
// directory dir. Every archive it names is a plain file name in dir.
func ReadManifest(dir string) (Manifest, error) {
	p := filepath.Join(dir, ManifestFile)
	f, err := os.Open(p)
	if err != nil {
		return Manifest{}, fmt.Errorf("pod checkpoint %s: %w", dir, err)
	}
	defer f.Close()
	m, err := DecodeManifest(f)
	if err != nil {
		return Manifest{}, fmt.Errorf("pod checkpoint %s: %w", p, err)
	}
	return m, nil
}

// DecodeManifest decodes and checks a manifest read from r (at most
// 4 MiB).
func DecodeManifest(r io.Reader) (Manifest, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxManifest+1))
	if err != nil {
		return Manifest{}, err
	}
	if len(b) > maxManifest {
		return Manifest{}, fmt.Errorf("manifest larger than %d bytes: %w", maxManifest, ErrInvalid)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("decode manifest: %v: %w", err, ErrInvalid)
	}
	return m, m.Validate()
}

// Validate checks a manifest: its kind and version, the pod's names, and
// that each container has a distinct valid name and an archive that is a
// plain file name ending in ".tar", and that a page server, where one is
// named, is a HOST:PORT.
func (m Manifest) Validate() error {
	if m.Kind != Kind || m.Version != Version {
		return fmt.Errorf("manifest kind %q version %d, want %q version %d: %w", m.Kind, m.Version, Kind, Version, ErrInvalid)
	}
	var errs []error
	for _, n := range []struct{ what, v string }{{"namespace", m.Namespace}, {"name", m.Name}} {
		if err := archive.CheckName(ManifestFile, n.what, n.v); err != nil {
			errs = append(errs, err)
		}
	}
	if len(m.Containers) == 0 {
		errs = append(errs, errors.New("no containers"))
	}
	seen := map[string]bool{}
	for i, c := range m.Containers {
		if err := archive.CheckName(ManifestFile, fmt.Sprintf("container %d name", i), c.Name); err != nil {
			errs = append(errs, err)
		} else if seen[c.Name] {
			errs = append(errs, fmt.Errorf("container %d: name %q appears twice", i, c.Name))
		}
		seen[c.Name] = true
		files := []string{c.Archive}
		if c.CheckpointImage != "" {
			files = append(files, c.CheckpointImage)
		}
		for _, f := range files {
			if !plainFile(f) || !strings.HasSuffix(f, ".tar") {
				errs = append(errs, fmt.Errorf("container %q: file %q is not a plain .tar name", c.Name, f))
			}
		}
		if c.PageServer != "" {
			if _, err := criu.ParsePageServer(c.PageServer); err != nil {
				errs = append(errs, fmt.Errorf("container %q: %w", c.Name, err))
			}
		}
	}
	for i, c := range m.InitContainers {
		if err := archive.CheckName(ManifestFile, fmt.Sprintf("init container %d name", i), c.Name); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("manifest: %w: %w", errors.Join(errs...), ErrInvalid)
	}
	return nil
}

// plainFile: a non-empty name with no slash that is neither . nor .. nor
// hidden.
func plainFile(s string) bool {
	return s != "" && !strings.ContainsRune(s, '/') && !strings.HasPrefix(s, ".") && len(s) <= 255 && !strings.ContainsRune(s, 0)
}

// ArchivePath is the path of container name's archive in the pod
// checkpoint dir, as m names it.
func (m Manifest) ArchivePath(dir, name string) (string, error) {
	for _, c := range m.Containers {
		if c.Name == name {
			return filepath.Join(dir, c.Archive), nil
		}
	}
	return "", fmt.Errorf("pod checkpoint %s has no container %q: %w", dir, name, errdefs.ErrNotFound)
}
