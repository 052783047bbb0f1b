package podman

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nodeshim/nodeshim/criu"
)

// LockWait bounds the wait for a podman command that holds podman's state
// database.
const LockWait = 10 * time.Second

// Target describes the running podman container idOrName under podman's
// storage root graphRoot for a checkpoint that podman restores (`podman
// container restore --import`): runc's CRIU options from the bundle's
// spec, podman's own config as config.dump, the bundle spec as spec.dump
// and the writable layer's changes. It is named pod and container after
// the container, in namespace "podman". The state database is the one
// podman on this host opens for graphRoot: the backend that the host's
// containers.conf files (or $CONTAINERS_CONF) set, else the BoltDB when it
// exists and SQLite otherwise.
func Target(procRoot, graphRoot, idOrName string, now time.Time) (criu.Target, error) {
	backend, err := ConfiguredBackend(ConfigFiles("/", os.Getenv("CONTAINERS_CONF")))
	if err != nil {
		return criu.Target{}, err
	}
	st, err := FindState(graphRoot, backend)
	if err != nil {
		return criu.Target{}, err
	}
	return StateTarget(procRoot, st, idOrName, now)
}

// StateTarget is Target on the state database st.
func StateTarget(procRoot string, st State, idOrName string, now time.Time) (criu.Target, error) {
	c, err := st.Lookup(idOrName, LockWait)
	if err != nil {
		return criu.Target{}, err
	}
	if err := c.Running(); err != nil {
		return criu.Target{}, err
	}
	t, err := criu.ContainerTarget(procRoot, c.Pid, c.Spec, filepath.Dir(c.SpecPath), now)
	if err != nil {
		return criu.Target{}, fmt.Errorf("podman container %s (%s): %w", c.Name, c.ID, err)
	}
	t.Ref = criu.ContainerRef{Namespace: "podman", Pod: c.Name, Container: c.Name}
	t.ID, t.Runtime, t.Created = c.ID, c.Runtime, c.Created
	t.Image, t.ImageRef, t.ConfigDump = c.Image, c.ImageID, c.Config
	t.Container.ExtMounts = extMountsFor(c.Runtime, t.Container.ExtMounts)
	return t, nil
}

// extMountsFor returns the external mounts of a dump that runtime (podman's
// OCI runtime name or path) restores. runc names a masked file's /dev/null
// bind mount "/dev/null" at dump (libcontainer's addMaskPaths) and its
// restore maps that name through the /dev/null device's mount; crun names
// it after the masked path itself (register_masked_paths_mounts in crun's
// src/libcrun/criu.c) and maps only those names at restore, so crun's
// restore of a runc-named dump fails with "No mapping for N:(null)
// mountpoint" (crun 1.21, CRIU 4.1.1).
func extMountsFor(runtime string, mounts []criu.ExtMount) []criu.ExtMount {
	if filepath.Base(runtime) != "crun" {
		return mounts
	}
	out := make([]criu.ExtMount, len(mounts))
	for i, m := range mounts {
		if m.Val == "/dev/null" && m.Key != "/dev/null" {
			m.Val = m.Key
		}
		out[i] = m
	}
	return out
}
