package config

import (
	"bytes"
	"os"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/nodeshim/nodeshim/testenv/golden"
)

// TestDefaultsGolden pins the local default configuration as a document,
// and checks that the document loads back to the same configuration.
func TestDefaultsGolden(t *testing.T) {
	got, err := yaml.Marshal(Defaults())
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "defaults.yaml", got)
	want, err := os.ReadFile(golden.Path("defaults.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Payload{Files: []File{{Name: BaseFile, Data: want}}}.Load()
	if err != nil {
		t.Fatalf("golden defaults do not load: %v", err)
	}
	back, _ := yaml.Marshal(cfg)
	if !bytes.Equal(back, want) {
		t.Errorf("defaults do not round-trip:\n%s", back)
	}
}

// TestNodeConfigStatusGolden pins the JSON shape of NodeConfigStatus.
func TestNodeConfigStatusGolden(t *testing.T) {
	f := newFixture(t)
	writeSource(t, f.source, map[string]string{BaseFile: goodConfig(1)})
	if err := f.c.Sync(); err != nil {
		t.Fatal(err)
	}
	writeSource(t, f.source, map[string]string{BaseFile: badUnknownField})
	if err := f.c.Sync(); err != nil {
		t.Fatal(err)
	}
	got, err := yaml.Marshal(struct {
		Status    NodeConfigStatus `json:"status"`
		Condition any              `json:"condition"`
	}{f.c.Status(), f.c.Status().Condition()})
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "nodeconfigstatus-rollback.yaml", got)
}
