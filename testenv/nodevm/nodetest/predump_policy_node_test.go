//go:build nodevm

package nodetest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/nodevm"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// activeConfigUID is the UID of the configuration serve has in force
// ("" for its defaults) once serve has taken in what it was assigned.
func activeConfigUID(t *testing.T) (string, error) {
	t.Helper()
	var doc status.Document
	if err := getJSON(t, "/status", &doc); err != nil {
		return "", err
	}
	c := doc.Config
	if c == nil || c.Active == nil {
		return "", nil
	}
	if c.Assigned != nil && c.Assigned.UID != c.Active.UID {
		return "", fmt.Errorf("assigned %s is not active yet (active %s, error %q)", c.Assigned.UID, c.Active.UID, c.Error)
	}
	return c.Active.UID, nil
}

// configDropIn puts cfg (a ShimConfiguration's fields) in force as the
// drop-in name of serve's configuration directory, written beside it and
// renamed into it as an operator's tooling does, and waits until serve
// has it active; it is removed, and the previous configuration back in
// force, when t ends.
func configDropIn(t *testing.T, name string, cfg map[string]any) {
	t.Helper()
	before, err := activeConfigUID(t)
	if err != nil {
		t.Fatal(err)
	}
	doc := map[string]any{"apiVersion": "nodeshim.io/v1alpha1", "kind": "ShimConfiguration"}
	for k, v := range cfg {
		doc[k] = v
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	dropin := filepath.Join(nodevm.NodeshimConfig, name)
	staged := filepath.Join(filepath.Dir(nodevm.NodeshimConfig), "."+name)
	if err := os.WriteFile(staged, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(staged, dropin); err != nil {
		t.Fatal(err)
	}
	waitActive := func(what string, done func(uid string) bool) {
		testutil.Eventually(t, what, func() error {
			uid, err := activeConfigUID(t)
			if err != nil {
				return err
			}
			if !done(uid) {
				return fmt.Errorf("active configuration %q", uid)
			}
			return nil
		})
	}
	waitActive("serve puts "+name+" in force", func(uid string) bool { return uid != before })
	t.Cleanup(func() {
		if err := os.Remove(dropin); err != nil {
			t.Error(err)
		}
		waitActive("serve puts the configuration without "+name+" back in force", func(uid string) bool { return uid == before })
	})
}

// lastCheckpointRecord is the newest checkpoint record of GET /status.
func lastCheckpointRecord(t *testing.T) status.CheckpointRecord {
	t.Helper()
	var doc status.Document
	if err := getJSON(t, "/status", &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Checkpoints) == 0 {
		t.Fatal("GET /status has no checkpoint record")
	}
	return doc.Checkpoints[len(doc.Checkpoints)-1]
}
