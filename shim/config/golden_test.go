package config

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestDefaultsGolden pins the local default configuration as a document,
// and checks that the document loads back to the same configuration.
func TestDefaultsGolden(t *testing.T) {
	got, err := yaml.Marshal(Defaults())
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "defaults.yaml")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("Defaults() as YAML =\n%s\nwant (%s)\n%s", got, golden, want)
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
	golden := filepath.Join("testdata", "nodeconfigstatus-rollback.yaml")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("status =\n%s\nwant (%s)\n%s", got, golden, want)
	}
}
