package podman

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

const (
	testID     = "e6cebbee61922bb8468eeffcb1393f95024ae8daf08746009e257e3c48bc95b7"
	testConfig = `{"spec":{"ociVersion":"1.0.2-dev","root":{"path":"/c/merged"}},"id":"` + testID + `","name":"cnt",` +
		`"rootfsImageID":"d11b91f0","rootfsImageName":"localhost/busybox:ckx","runtime":"runc",` +
		`"createdTime":"2026-11-25T19:22:01Z","staticDir":"/s/overlay-containers/` + testID + `/userdata","shmSize":65536000}`
	testState = `{"state":3,"pid":19390,"mountPoint":"/c/merged","configPath":"%s"}`
)

// writeDB writes a state database laid out as podman 4's BoltDB: ctr/<id>
// with config, state and networks, and the name registry.
func writeDB(t *testing.T, specPath string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bolt_state.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		ctrs, err := tx.CreateBucket(ctrBkt)
		if err != nil {
			return err
		}
		c, err := ctrs.CreateBucket([]byte(testID))
		if err != nil {
			return err
		}
		if err := c.Put(configKey, []byte(testConfig)); err != nil {
			return err
		}
		if err := c.Put(stateKey, []byte(strings.Replace(testState, "%s", specPath, 1))); err != nil {
			return err
		}
		nets, err := c.CreateBucket(networksBkt)
		if err != nil {
			return err
		}
		if err := nets.Put([]byte("podman"), []byte(`{"interface_name":"eth0"}`)); err != nil {
			return err
		}
		names, err := tx.CreateBucket(nameRegistryBkt)
		if err != nil {
			return err
		}
		return names.Put([]byte("cnt"), []byte(testID))
	})
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLookup(t *testing.T) {
	specPath := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(specPath, []byte(`{"ociVersion":"1.0.2-dev","root":{"path":"/c/merged"},"mounts":[{"destination":"/etc/hosts","type":"bind","source":"/r/hosts"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	db := writeDB(t, specPath)
	for _, name := range []string{testID, "cnt", testID[:12]} {
		t.Run(name, func(t *testing.T) {
			c, err := (State{BackendBoltDB, db}).Lookup(name, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if c.ID != testID || c.Name != "cnt" || c.Pid != 19390 || c.State != "running" || c.Mountpoint != "/c/merged" ||
				c.Image != "localhost/busybox:ckx" || c.Runtime != "runc" || c.SpecPath != specPath {
				t.Errorf("Lookup = %+v", c)
			}
			if err := c.Running(); err != nil {
				t.Error(err)
			}
			// The bundle's spec, with podman's start-time mounts.
			if len(c.Spec.Mounts) != 1 || c.Spec.Mounts[0].Destination != "/etc/hosts" {
				t.Errorf("spec mounts %+v, want the bundle's", c.Spec.Mounts)
			}
			var cfg map[string]json.RawMessage
			if err := json.Unmarshal(c.Config, &cfg); err != nil {
				t.Fatal(err)
			}
			if string(cfg["networks"]) != `{"podman":{"interface_name":"eth0"}}` || string(cfg["shmSize"]) != "65536000" {
				t.Errorf("config.dump keeps podman's fields and adds the networks: %s", c.Config)
			}
		})
	}
	if _, err := (State{BackendBoltDB, db}).Lookup("nope", time.Second); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown container: err = %v, want ErrNotFound", err)
	}
	if _, err := (State{BackendBoltDB, filepath.Join(t.TempDir(), "missing.db")}).Lookup("cnt", time.Second); err == nil {
		t.Error("a missing database: no error")
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct{ name, config, state string }{
		{"config not JSON", "{", "{}"},
		{"no id", `{"spec":{}}`, "{}"},
		{"no spec", `{"id":"x"}`, "{}"},
		{"state not JSON", testConfig, "["},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Decode([]byte(tc.config), []byte(tc.state), nil); err == nil {
				t.Error("no error")
			}
		})
	}
	c, err := Decode([]byte(testConfig), []byte(`{"state":6,"pid":0}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Running(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("an exited container: Running() = %v, want ErrNotRunning", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(testConfig), []byte(testState))
	f.Add([]byte(`{"id":"a","spec":{"mounts":null}}`), []byte(`{"state":99}`))
	f.Fuzz(func(t *testing.T, config, state []byte) {
		c, err := Decode(config, state, map[string]json.RawMessage{"n": json.RawMessage(`{}`)})
		if err != nil {
			return
		}
		if c.ID == "" || c.Spec == nil || !json.Valid(c.Config) {
			t.Errorf("Decode accepted %q with id %q, spec %v, config %q", config, c.ID, c.Spec, c.Config)
		}
	})
}
