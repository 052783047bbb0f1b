package criu

import (
	"io"

	"github.com/nodeshim/nodeshim/criu/archive"
)

// Engine names the runtime whose archive layout a checkpoint archive
// follows (archive.Engine).
type Engine = archive.Engine

// The engines nodeshim tells apart (see package archive).
const (
	EnginePodman     = archive.EnginePodman
	EngineCRIO       = archive.EngineCRIO
	EngineContainerd = archive.EngineContainerd
	EngineProcess    = archive.EngineProcess
	EngineUnknown    = archive.EngineUnknown
)

// Annotations that tell the engines apart (see package archive).
const (
	AnnotationContainerManager = archive.AnnotationContainerManager
	AnnotationCRIContainerType = archive.AnnotationCRIContainerType
)

// ArchiveMeta is what config.dump, spec.dump and status.dump of an
// archive say about the container in it, every value checked
// (archive.Meta).
type ArchiveMeta = archive.Meta

// ReadArchiveMeta is archive.ReadMeta: it reads and checks the metadata
// members of the tar stream r and says which engine the archive is for.
func ReadArchiveMeta(r io.Reader) (ArchiveMeta, error) { return archive.ReadMeta(r) }
