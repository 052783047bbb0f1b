// Package podman resolves a container that podman runs (with runc or crun,
// outside any CRI) from podman's own state database: the SQLite database
// podman 5 keeps by default (<graph root>/db.sql, tables ContainerConfig and
// ContainerState with JSON columns, libpod/sqlite_state.go) or the BoltDB of
// podman 4 (<graph root>/libpod/bolt_state.db). FindState picks the one
// podman itself would open. From it comes the container's config (podman's
// ContainerConfig, which podman writes as config.dump into its checkpoint
// archives and reads back to restore one), its OCI runtime spec, and its
// state (pid, root mount point). Reading the database directly needs no
// podman binary and no podman service; the database is opened read-only,
// so podman waits at most for one short read.
package podman

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// DefaultGraphRoot is podman's default storage root for root.
const DefaultGraphRoot = "/var/lib/containers/storage"

// ErrNotFound: no container of that id, id prefix or name.
var ErrNotFound = errdefs.New(errdefs.ErrNotFound, "podman container not found")

// ErrNotRunning: the container exists but has no running process.
var ErrNotRunning = errors.New("podman container is not running")

// Container is a podman container as its state database records it.
type Container struct {
	// ID and Name are podman's.
	ID, Name string
	// Pid is the container's init process in the host pid namespace.
	Pid int
	// State is podman's state name ("running", "exited", ...).
	State string
	// Mountpoint is the container's root filesystem on the host.
	Mountpoint string
	// Image is the image name the container was created from, ImageID its id.
	Image, ImageID string
	// Runtime is the OCI runtime's name ("runc", "crun").
	Runtime string
	// Created is when podman created it.
	Created time.Time
	// Spec is the OCI runtime spec the container runs with: the bundle's
	// config.json (SpecPath), which has the mounts podman adds at start
	// (/etc/hosts, /dev/shm, ...) that its config's spec lacks.
	Spec *specs.Spec
	// SpecPath is the bundle's config.json.
	SpecPath string
	// Config is podman's ContainerConfig as JSON, with the networks
	// added back as podman's own checkpoint export does; it is the
	// config.dump podman restores from.
	Config []byte
}

// The bucket and key names of podman 4's BoltDB state
// (libpod/boltdb_state_internal.go).
var (
	ctrBkt          = []byte("ctr")
	nameRegistryBkt = []byte("name-registry")
	configKey       = []byte("config")
	stateKey        = []byte("state")
	networksBkt     = []byte("networks")
)

// lookupBolt finds the container idOrName in podman 4's BoltDB at dbPath.
func lookupBolt(dbPath, idOrName string, timeout time.Duration) (Container, error) {
	db, err := bolt.Open(dbPath, 0o600, &bolt.Options{ReadOnly: true, Timeout: timeout})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return Container{}, errdefs.New(errdefs.ErrUnavailable, fmt.Sprintf("podman boltdb state %s is locked: %v", dbPath, err))
	}
	if err != nil {
		return Container{}, fmt.Errorf("open podman boltdb state %s: %w", dbPath, err)
	}
	defer db.Close()
	var c Container
	err = db.View(func(tx *bolt.Tx) error {
		ctrs := tx.Bucket(ctrBkt)
		if ctrs == nil {
			return fmt.Errorf("%s has no containers bucket: %w", dbPath, ErrNotFound)
		}
		id, err := resolveID(tx, ctrs, idOrName)
		if err != nil {
			return err
		}
		b := ctrs.Bucket(id)
		cfg, st := b.Get(configKey), b.Get(stateKey)
		if cfg == nil || st == nil {
			return fmt.Errorf("podman container %s has no config or state in %s", id, dbPath)
		}
		nets := map[string]json.RawMessage{}
		if nb := b.Bucket(networksBkt); nb != nil {
			if err := nb.ForEach(func(k, v []byte) error {
				nets[string(k)] = json.RawMessage(append([]byte(nil), v...))
				return nil
			}); err != nil {
				return err
			}
		}
		c, err = Decode(cfg, st, nets)
		return err
	})
	if err != nil {
		return Container{}, fmt.Errorf("podman container %q in boltdb state %s: %w", idOrName, dbPath, err)
	}
	return c.withBundleSpec()
}

// withBundleSpec replaces c.Spec by the bundle's config.json, which a
// running container must have.
func (c Container) withBundleSpec() (Container, error) {
	if c.SpecPath != "" {
		b, err := os.ReadFile(c.SpecPath)
		if err != nil && c.State == "running" {
			return Container{}, fmt.Errorf("podman container %s: %w", c.ID, err)
		}
		if err == nil {
			var sp specs.Spec
			if err := json.Unmarshal(b, &sp); err != nil {
				return Container{}, fmt.Errorf("podman container %s: decode %s: %w", c.ID, c.SpecPath, err)
			}
			c.Spec = &sp
		}
	}
	return c, nil
}

// resolveID finds a container id by id, name or unique id prefix, as
// podman's LookupContainer does.
func resolveID(tx *bolt.Tx, ctrs *bolt.Bucket, idOrName string) ([]byte, error) {
	if idOrName == "" {
		return nil, ErrNotFound
	}
	if ctrs.Bucket([]byte(idOrName)) != nil {
		return []byte(idOrName), nil
	}
	if names := tx.Bucket(nameRegistryBkt); names != nil {
		if id := names.Get([]byte(idOrName)); id != nil && ctrs.Bucket(id) != nil {
			return append([]byte(nil), id...), nil
		}
	}
	var match []byte
	err := ctrs.ForEach(func(k, _ []byte) error {
		if strings.HasPrefix(string(k), idOrName) {
			if match != nil {
				return fmt.Errorf("id prefix %q is ambiguous", idOrName)
			}
			match = append([]byte(nil), k...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if match == nil {
		return nil, ErrNotFound
	}
	return match, nil
}

// podman's ContainerState values (libpod/define/containerstate.go).
var stateNames = map[int]string{
	0: "unknown", 1: "configured", 2: "created", 3: "running",
	4: "stopped", 5: "paused", 6: "exited", 7: "removing", 8: "stopping",
}

// Decode builds a Container from podman's JSON config and state records and
// the container's networks (name to podman's PerNetworkOptions JSON).
func Decode(config, state []byte, networks map[string]json.RawMessage) (Container, error) {
	var cfg struct {
		ID          string      `json:"id"`
		Name        string      `json:"name"`
		Spec        *specs.Spec `json:"spec"`
		ImageID     string      `json:"rootfsImageID"`
		ImageName   string      `json:"rootfsImageName"`
		Runtime     string      `json:"runtime"`
		CreatedTime time.Time   `json:"createdTime"`
		StaticDir   string      `json:"staticDir"`
	}
	if err := json.Unmarshal(config, &cfg); err != nil {
		return Container{}, fmt.Errorf("decode podman config: %w", err)
	}
	if cfg.ID == "" || cfg.Spec == nil {
		return Container{}, errors.New("podman config has no id or no spec")
	}
	var st struct {
		State      int    `json:"state"`
		PID        int    `json:"pid"`
		Mountpoint string `json:"mountPoint"`
		ConfigPath string `json:"configPath"`
	}
	if err := json.Unmarshal(state, &st); err != nil {
		return Container{}, fmt.Errorf("decode podman state of %s: %w", cfg.ID, err)
	}
	// Podman's checkpoint export puts the networks (kept in their own
	// bucket since podman 4.0) back into the config it writes.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(config, &raw); err != nil {
		return Container{}, fmt.Errorf("decode podman config: %w", err)
	}
	if len(networks) > 0 {
		b, err := json.Marshal(networks)
		if err != nil {
			return Container{}, err
		}
		raw["networks"] = b
	}
	out, err := json.Marshal(raw)
	if err != nil {
		return Container{}, err
	}
	c := Container{
		ID: cfg.ID, Name: cfg.Name, Pid: st.PID, State: stateNames[st.State], Mountpoint: st.Mountpoint,
		Image: cfg.ImageName, ImageID: cfg.ImageID, Runtime: cfg.Runtime, Created: cfg.CreatedTime,
		Spec: cfg.Spec, Config: out, SpecPath: st.ConfigPath,
	}
	if c.SpecPath == "" && cfg.StaticDir != "" {
		c.SpecPath = filepath.Join(cfg.StaticDir, "config.json")
	}
	if c.State == "" {
		c.State = fmt.Sprintf("state %d", st.State)
	}
	return c, nil
}

// Running checks that c has a running process.
func (c Container) Running() error {
	if c.State != "running" || c.Pid <= 0 {
		return fmt.Errorf("podman container %s (%s) is %s: %w", c.Name, c.ID, c.State, ErrNotRunning)
	}
	return nil
}
