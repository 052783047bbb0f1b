package criu

import (
	"fmt"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/criu/archive"
)

// ContainerRef names a Kubernetes container the way kubelet's Checkpoint API
// does: /checkpoint/{namespace}/{pod}/{container} (archive.ContainerRef).
type ContainerRef = archive.ContainerRef

// Target is what a checkpoint dumps: the process tree under one init pid,
// the identity written into the archive's metadata, and the CRIU options a
// container runtime passes for such a tree. A Resolver fills it for a
// Kubernetes container; PIDTarget fills it for a plain process tree.
type Target struct {
	// Pid is the root of the process tree, in nodeshim's pid namespace.
	Pid int
	// Ref names the container; it is used for the archive's name and for
	// the CRI annotations in spec.dump.
	Ref ContainerRef
	// ID is the runtime's container id ("pid-N" for a plain process).
	ID string
	// Runtime names the runtime that manages the target, for config.dump
	// (for example "containerd/runc"; "host" for a plain process).
	Runtime string
	// Created is when the container (or process) was started.
	Created time.Time
	// Args is the command line of the root process, recorded in spec.dump.
	Args []string
	// Annotations are added to spec.dump beside the CRI annotations.
	Annotations map[string]string
	// Container holds what CRIU needs to dump a container rather than a
	// plain process; the zero value dumps a plain process tree.
	Container ContainerOptions
	// Spec, when set, is the container's OCI runtime spec: spec.dump is
	// then the whole spec with the CRI annotations added, as CRI-O and
	// podman write it.
	Spec *specs.Spec
	// ConfigDump, when set, is written as config.dump verbatim: the
	// runtime's own record of the container (podman's ContainerConfig),
	// which that runtime reads back to restore it.
	ConfigDump []byte
	// Status, when set, is the runtime's CRI status of the container,
	// written as status.dump as containerd writes it; when nil a status
	// is built from the fields above.
	Status *runtimeapi.ContainerStatus
	// Image and ImageRef name the container's image for config.dump
	// (rootfsImageName, rootfsImageRef).
	Image, ImageRef string
	// Layer is the container's writable layer; when its upper directory
	// is set, the archive carries rootfs-diff.tar and deleted.files.
	Layer Layer
}

// Layer is an overlay writable layer: the upper directory that holds the
// container's changes and the lower directories (the image) under it
// (archive.Layer).
type Layer = archive.Layer

// ContainerOptions are the CRIU options that a container runtime passes for
// a container (runc sets the same ones in its CriuOpts): a plain process
// tree on the host needs none of them.
type ContainerOptions struct {
	// Root is the container's root filesystem as seen from nodeshim
	// (CriuOpts.root), empty for the host's root.
	Root string
	// External lists CRIU's --external entries: external mounts
	// ("mnt[/etc/hosts]:/etc/hosts"), namespaces ("net[4026531840]:extNetNs")
	// and devices, exactly as runc passes bind mounts and shared namespaces.
	External []string
	// ManageCgroups asks CRIU to dump the cgroup of the tree
	// (CriuOpts.manage_cgroups) and restore it.
	ManageCgroups bool
	// FreezeCgroup is the path of a freezer cgroup that holds exactly the
	// tree (CriuOpts.freeze_cgroup); CRIU then freezes through it instead
	// of seizing task by task.
	FreezeCgroup string
	// OrphanPtsMaster lets CRIU dump a tree whose terminal master is
	// outside it (a container with a tty).
	OrphanPtsMaster bool
	// ExtMounts are the external mounts (CriuOpts.ext_mnt): each bind
	// mount of the container under its destination, as runc passes them.
	ExtMounts []ExtMount
	// Descriptors is what fds 0-2 of the init process point to; when set
	// it is written to the images as descriptors.json, which runc restore
	// needs to reconnect the stdio pipes.
	Descriptors []string
}

// validNamePart reports whether s follows the naming rules of a
// Kubernetes object name part: 1 to 253 letters, digits, '-', '_' and '.',
// with a letter or digit at both ends. kubelet puts these strings into a
// file name, so nodeshim refuses anything else. (A regular expression with
// the bounded repetition compiles to a program of hundreds of states, at
// every start of the binary.)
func validNamePart(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	for i := range len(s) {
		c := s[i]
		if !alnum(c) && (i == 0 || i == len(s)-1 || c != '-' && c != '_' && c != '.') {
			return false
		}
	}
	return true
}

// Validate checks that t can be dumped and named safely.
func (t Target) Validate() error {
	if t.Pid <= 0 {
		return fmt.Errorf("target %s: pid %d is not a process", t.Ref, t.Pid)
	}
	for _, p := range []struct{ what, v string }{
		{"namespace", t.Ref.Namespace}, {"pod", t.Ref.Pod}, {"container", t.Ref.Container},
	} {
		if !validNamePart(p.v) {
			return fmt.Errorf("target pid %d: %s %q is not a valid name for an archive", t.Pid, p.what, p.v)
		}
	}
	return nil
}

// sanitizeName turns a process name into a valid container-name part.
func sanitizeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	out := strings.Trim(b.String(), "-._")
	if out == "" {
		return "process"
	}
	return out
}
