package archive

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Engine names the runtime whose archive layout a checkpoint archive
// follows, and so which runtime can bring it back.
type Engine string

// The engines nodeshim tells apart, by what checkpointctl looks at too.
const (
	// EnginePodman: spec.dump is a podman bundle's spec, annotated
	// io.container.manager=libpod; config.dump is podman's
	// ContainerConfig. podman container restore --import restores it.
	EnginePodman Engine = "podman"
	// EngineCRIO: spec.dump annotated io.container.manager=cri-o.
	EngineCRIO Engine = "cri-o"
	// EngineContainerd: a CRI container of containerd, whose spec carries
	// containerd's io.kubernetes.cri.container-type annotation.
	EngineContainerd Engine = "containerd"
	// EngineProcess: a plain process tree nodeshim checkpointed by pid
	// (config.dump runtime "host"); criu restores it as it was.
	EngineProcess Engine = "process"
	// EngineUnknown: none of the above.
	EngineUnknown Engine = "unknown"
)

// Annotations that tell the engines apart.
const (
	// AnnotationContainerManager is set by podman ("libpod") and CRI-O
	// ("cri-o") in the specs they run.
	AnnotationContainerManager = "io.container.manager"
	// AnnotationCRIContainerType is set by containerd's CRI plugin in every
	// CRI container's spec ("container" or "sandbox").
	AnnotationCRIContainerType = "io.kubernetes.cri.container-type"
)

// Meta is what config.dump, spec.dump and status.dump of an archive say
// about the container in it, every value checked against its grammar.
type Meta struct {
	// Engine is the runtime the archive is for.
	Engine Engine
	// Config holds the fields of config.dump that checkpointctl reads
	// (podman's ContainerConfig has them under the same JSON names),
	// checked (ContainerConfig.Check).
	Config ContainerConfig
	// Annotations are spec.dump's annotations, checked
	// (CheckAnnotations).
	Annotations map[string]string
	// ConfigDump and SpecDump are the two files verbatim.
	ConfigDump, SpecDump []byte
	// Status is status.dump, checked (CheckStatus), when the archive has
	// one.
	Status *runtimeapi.ContainerStatus
}

// MaxMetaSize bounds config.dump, spec.dump and status.dump as they are
// read into memory.
const MaxMetaSize = 16 << 20

// ReadMeta reads config.dump, spec.dump and status.dump from the tar
// stream r, checks every value a consumer passes on (names, runtime,
// image references, annotations) and says which engine the archive is
// for. It does not validate the rest of the archive (Validate does).
func ReadMeta(r io.Reader) (Meta, error) {
	var m Meta
	var status []byte
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return m, fmt.Errorf("%w: read tar: %w", ErrInvalid, err)
		}
		name, err := cleanEntryName(h.Name)
		if err != nil {
			return m, err
		}
		if h.Typeflag != tar.TypeReg || (name != ConfigDump && name != SpecDump && name != StatusDump) {
			continue
		}
		if h.Size > MaxMetaSize {
			return m, fmt.Errorf("%w: %s has %d bytes, more than %d", ErrInvalid, name, h.Size, MaxMetaSize)
		}
		b, err := io.ReadAll(io.LimitReader(tr, MaxMetaSize))
		if err != nil {
			return m, fmt.Errorf("%w: read %s: %w", ErrInvalid, name, err)
		}
		switch name {
		case ConfigDump:
			m.ConfigDump = b
		case SpecDump:
			m.SpecDump = b
		default:
			status = b
		}
	}
	for _, f := range []struct {
		name string
		b    []byte
	}{{ConfigDump, m.ConfigDump}, {SpecDump, m.SpecDump}} {
		if f.b == nil {
			return m, fmt.Errorf("%w: no %s", ErrInvalid, f.name)
		}
	}
	if err := json.Unmarshal(m.ConfigDump, &m.Config); err != nil {
		return m, fmt.Errorf("%w: %s: %w", ErrInvalid, ConfigDump, err)
	}
	if err := m.Config.Check(); err != nil {
		return m, err
	}
	var sp struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(m.SpecDump, &sp); err != nil {
		return m, fmt.Errorf("%w: %s: %w", ErrInvalid, SpecDump, err)
	}
	if err := CheckAnnotations(SpecDump, sp.Annotations); err != nil {
		return m, err
	}
	m.Annotations = sp.Annotations
	if status != nil {
		st, err := CheckStatus(status)
		if err != nil {
			return m, err
		}
		m.Status = st
	}
	m.Engine = engineOf(m.Config, m.Annotations)
	return m, nil
}

// CheckStatus decodes status.dump, a CRI ContainerStatus as containerd
// writes it, and checks what containerd's restore takes from it to
// create the container: its id and name, its image references, and its
// labels and annotations (a CDI annotation among them asks for devices).
func CheckStatus(b []byte) (*runtimeapi.ContainerStatus, error) {
	var st runtimeapi.ContainerStatus
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, StatusDump, err)
	}
	if st.Id != "" {
		if err := CheckName(StatusDump, "id", st.Id); err != nil {
			return nil, err
		}
	}
	if n := st.GetMetadata().GetName(); n != "" {
		if err := CheckName(StatusDump, "metadata.name", n); err != nil {
			return nil, err
		}
	}
	for _, f := range []struct{ what, v string }{
		{"image.image", st.GetImage().GetImage()}, {"image.userSpecifiedImage", st.GetImage().GetUserSpecifiedImage()},
		{"image_ref", st.ImageRef}, {"image_id", st.ImageId},
	} {
		if f.v != "" {
			if err := CheckImageRef(StatusDump, f.what, f.v); err != nil {
				return nil, err
			}
		}
	}
	if err := CheckAnnotations(StatusDump, st.Labels); err != nil {
		return nil, err
	}
	if err := CheckAnnotations(StatusDump, st.Annotations); err != nil {
		return nil, err
	}
	return &st, nil
}

func engineOf(c ContainerConfig, ann map[string]string) Engine {
	switch ann[AnnotationContainerManager] {
	case "libpod":
		return EnginePodman
	case "cri-o":
		return EngineCRIO
	}
	if _, ok := ann[AnnotationCRIContainerType]; ok {
		return EngineContainerd
	}
	if c.OCIRuntime == "host" {
		return EngineProcess
	}
	return EngineUnknown
}
