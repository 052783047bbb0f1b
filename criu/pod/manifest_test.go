package pod

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/testenv/golden"
)

var at = time.Date(2026, 11, 28, 3, 30, 0, 0, time.UTC)

// sample is a manifest of a two-container pod with a finished init
// container.
func sample() Manifest {
	return Manifest{Kind: Kind, Version: Version, Namespace: "default", Name: "web-0", UID: "0b5f0c2e-6a2b-4d7e-9c1a-3f2e1d0c9b8a",
		SandboxID: "3a1c", CheckpointedAt: at, FrozenAt: at.Add(time.Millisecond), ThawedAt: at.Add(400 * time.Millisecond),
		Sandbox: Sandbox{Hostname: "web-0", Namespaces: NamespaceOptions{Network: "POD", PID: "CONTAINER", IPC: "POD"},
			RuntimeHandler: "runc", CgroupParent: "/kubepods/podx", Architecture: "amd64", Kernel: "6.18.44", CRIUVersion: "4.1.1",
			Config: json.RawMessage(`{"hostname":"web-0"}`)},
		Containers: []Container{
			{Name: "app", ID: "c1", Image: "docker.io/library/busybox:latest", Archive: "checkpoint-web-0_default-app-2026-11-28T03:30:00Z.tar", Size: 4096,
				DumpStartedAt: at.Add(2 * time.Millisecond), DumpFinishedAt: at.Add(200 * time.Millisecond)},
			{Name: "sidecar", ID: "c2", Archive: "checkpoint-web-0_default-sidecar-2026-11-28T03:30:00Z.tar", Size: 4096,
				CheckpointImage: "checkpoint-web-0_default-sidecar-2026-11-28T03:30:00Z.oci.tar", CheckpointImageRef: "localhost/web-sidecar:1",
				DumpStartedAt: at.Add(200 * time.Millisecond), DumpFinishedAt: at.Add(390 * time.Millisecond)},
		},
		InitContainers: []InitContainer{{Name: "setup", ID: "c0", ExitCode: 0, FinishedAt: at.Add(-time.Minute)}},
	}
}

// TestManifestRoundTrip writes the sample as Checkpoint does and reads it
// back with ReadManifest; the golden file shows the layout the restore
// side reads.
func TestManifestRoundTrip(t *testing.T) {
	m := sample()
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "manifest.json", b)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := json.Marshal(got)
	b1, _ := json.Marshal(m)
	if !bytes.Equal(b1, b2) {
		t.Errorf("read back\n%s\nwant\n%s", b2, b1)
	}
	p, err := got.ArchivePath(dir, "sidecar")
	if err != nil || p != filepath.Join(dir, m.Containers[1].Archive) {
		t.Errorf("ArchivePath sidecar: %s, %v", p, err)
	}
	if _, err := got.ArchivePath(dir, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("ArchivePath of an unknown container: %v", err)
	}
	if _, err := ReadManifest(t.TempDir()); err == nil {
		t.Error("a directory without a manifest read")
	}
}

func TestManifestValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Manifest)
	}{
		{"wrong kind", func(m *Manifest) { m.Kind = "other" }},
		{"future version", func(m *Manifest) { m.Version = 2 }},
		{"namespace with a slash", func(m *Manifest) { m.Namespace = "a/b" }},
		{"empty pod name", func(m *Manifest) { m.Name = "" }},
		{"no containers", func(m *Manifest) { m.Containers = nil }},
		{"container twice", func(m *Manifest) { m.Containers[1].Name = "app" }},
		{"container name a flag", func(m *Manifest) { m.Containers[0].Name = "-x" }},
		{"archive escapes", func(m *Manifest) { m.Containers[0].Archive = "../../etc/shadow.tar" }},
		{"archive absolute", func(m *Manifest) { m.Containers[0].Archive = "/etc/x.tar" }},
		{"archive hidden", func(m *Manifest) { m.Containers[0].Archive = ".nodeshim-work-1-x.tar" }},
		{"archive not a tar", func(m *Manifest) { m.Containers[0].Archive = "manifest.json" }},
		{"image escapes", func(m *Manifest) { m.Containers[1].CheckpointImage = "../x.tar" }},
		{"init container name", func(m *Manifest) { m.InitContainers[0].Name = "a b" }},
		{"page server without a port", func(m *Manifest) { m.Containers[0].PageServer = "10.0.0.7" }},
		{"page server port out of range", func(m *Manifest) { m.Containers[0].PageServer = "10.0.0.7:70000" }},
		{"page server without a host", func(m *Manifest) { m.Containers[0].PageServer = ":7000" }},
	}
	if err := sample().Validate(); err != nil {
		t.Fatalf("sample: %v", err)
	}
	lazy := sample()
	lazy.Containers[0].PageServer, lazy.Containers[1].PageServer = "10.0.0.7:7001", "[fd00::7]:7002"
	if err := lazy.Validate(); err != nil {
		t.Fatalf("lazy sample: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := sample()
			tt.change(&m)
			err := m.Validate()
			if !errors.Is(err, ErrInvalid) || !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("Validate: %v, want ErrInvalid", err)
			}
		})
	}
}

func TestName(t *testing.T) {
	tests := []struct {
		name          string
		ok            bool
		ns, pod       string
		attempt       int
		wantRoundTrip bool
	}{
		{Name("default", "web-0", at, 0), true, "default", "web-0", 0, true},
		{Name("kube-system", "a.b-c", at, 12), true, "kube-system", "a.b-c", 12, true},
		{"checkpoint-web-0_default-app-2026-11-28T03:30:00Z.tar", false, "", "", 0, false},
		{"checkpoint-web-0_default-2026-11-28T03:30:00Z.tar", false, "", "", 0, false},
		{".nodeshim-work-1-ab", false, "", "", 0, false},
		{"checkpoint-web-0_default-2026-13-28T03:30:00Z", false, "", "", 0, false},
		{"checkpoint-web-0_default-2026-11-28T03:30:00Z-1234567", false, "", "", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns, pod, when, attempt, ok := ParseName(tt.name)
			if ok != tt.ok || ns != tt.ns || pod != tt.pod || attempt != tt.attempt || (ok && !when.Equal(at)) {
				t.Errorf("ParseName: %q %q %s %d %v, want %q %q %d %v", ns, pod, when, attempt, ok, tt.ns, tt.pod, tt.attempt, tt.ok)
			}
		})
	}
	if n := Name("default", "web-0", at.In(time.FixedZone("x", 3600)), 0); !strings.HasSuffix(n, "T03:30:00Z") {
		t.Errorf("Name in another zone: %s, want UTC", n)
	}
}

func FuzzDecodeManifest(f *testing.F) {
	b, _ := json.Marshal(sample())
	f.Add(b)
	f.Add([]byte(`{"kind":"nodeshim.io/pod-checkpoint","version":1}`))
	f.Add([]byte(`null`))
	lazy := sample()
	lazy.Containers[0].PageServer = "10.0.0.7:7001"
	b, _ = json.Marshal(lazy)
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeManifest(bytes.NewReader(data))
		if err != nil {
			return
		}
		// A manifest accepted names only plain files in the directory,
		// and page servers a restore can dial.
		for _, c := range m.Containers {
			if c.PageServer != "" {
				if _, err := criu.ParsePageServer(c.PageServer); err != nil {
					t.Fatalf("accepted page server %q: %v", c.PageServer, err)
				}
			}
			for _, f := range []string{c.Archive, c.CheckpointImage} {
				if strings.Contains(f, "/") || strings.HasPrefix(f, ".") {
					t.Fatalf("accepted file name %q", f)
				}
			}
		}
	})
}

func FuzzParseName(f *testing.F) {
	f.Add(Name("default", "web-0", at, 3))
	f.Add("checkpoint-a_b-2026-11-28T03:30:00Z")
	f.Fuzz(func(t *testing.T, name string) {
		ns, pod, when, attempt, ok := ParseName(name)
		if !ok {
			return
		}
		if got := Name(ns, pod, when, attempt); got != name {
			t.Fatalf("ParseName(%q) then Name: %q", name, got)
		}
	})
}
