package criu

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// ArchiveMeta is what config.dump and spec.dump of an archive say about
// the container in it.
type ArchiveMeta struct {
	// Engine is the runtime the archive is for.
	Engine Engine
	// Config holds the fields of config.dump that checkpointctl reads
	// (podman's ContainerConfig has them under the same JSON names).
	Config ContainerConfig
	// Annotations are spec.dump's annotations.
	Annotations map[string]string
	// ConfigDump and SpecDump are the two files verbatim.
	ConfigDump, SpecDump []byte
}

// maxMetaSize bounds config.dump and spec.dump as ReadArchiveMeta reads them.
const maxMetaSize = 16 << 20

// ReadArchiveMeta reads config.dump and spec.dump from the tar stream r
// and says which engine the archive is for. It does not validate the rest
// of the archive (ValidateArchive does).
func ReadArchiveMeta(r io.Reader) (ArchiveMeta, error) {
	var m ArchiveMeta
	tr := tar.NewReader(r)
	for m.ConfigDump == nil || m.SpecDump == nil {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return m, fmt.Errorf("%w: read tar: %w", ErrInvalidArchive, err)
		}
		name, err := cleanEntryName(h.Name)
		if err != nil {
			return m, err
		}
		if h.Typeflag != tar.TypeReg || (name != ConfigDump && name != SpecDump) {
			continue
		}
		if h.Size > maxMetaSize {
			return m, fmt.Errorf("%w: %s has %d bytes, more than %d", ErrInvalidArchive, name, h.Size, maxMetaSize)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return m, fmt.Errorf("%w: read %s: %w", ErrInvalidArchive, name, err)
		}
		if name == ConfigDump {
			m.ConfigDump = b
		} else {
			m.SpecDump = b
		}
	}
	for _, f := range []struct {
		name string
		b    []byte
	}{{ConfigDump, m.ConfigDump}, {SpecDump, m.SpecDump}} {
		if f.b == nil {
			return m, fmt.Errorf("%w: no %s", ErrInvalidArchive, f.name)
		}
	}
	if err := json.Unmarshal(m.ConfigDump, &m.Config); err != nil {
		return m, fmt.Errorf("%w: %s: %w", ErrInvalidArchive, ConfigDump, err)
	}
	var sp struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(m.SpecDump, &sp); err != nil {
		return m, fmt.Errorf("%w: %s: %w", ErrInvalidArchive, SpecDump, err)
	}
	m.Annotations = sp.Annotations
	m.Engine = engineOf(m.Config, m.Annotations)
	return m, nil
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
