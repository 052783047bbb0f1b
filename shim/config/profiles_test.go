package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeProfilesSource lays out dir as kubelet does a ConfigMap volume whose
// items put keys below seccompProfiles/: the files in a timestamped
// directory behind ..data, one top-level link per top-level entry.
func writeProfilesSource(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	ts := filepath.Join(dir, "..2026_01_01_00_00_00.1")
	for n, v := range files {
		p := filepath.Join(ts, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for _, top := range []string{BaseFile, ProfilesDir} {
		if err := os.Symlink(filepath.Join("..data", top), filepath.Join(dir, top)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReadSourceProfiles(t *testing.T) {
	dir := t.TempDir()
	writeProfilesSource(t, dir, map[string]string{
		BaseFile:                           typeMetaDoc,
		"seccompProfiles/audit.json":       `{"defaultAction":"SCMP_ACT_LOG"}`,
		"seccompProfiles/team/deny.json":   `{"defaultAction":"SCMP_ACT_ERRNO"}`,
		"seccompProfiles/.hidden.json":     `{}`,
		"seccompProfiles/..x/ignored.json": `{}`,
		"other/ignored.json":               `{}`,
	})
	p, err := ReadSource(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range p.Files {
		names = append(names, f.Name)
	}
	if got, want := strings.Join(names, " "), "config.yaml seccompProfiles/audit.json seccompProfiles/team/deny.json"; got != want {
		t.Fatalf("payload files %q, want %q", got, want)
	}
	cfg, err := p.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.SeccompProfiles) != 2 || cfg.SeccompProfiles["team/deny.json"] != `{"defaultAction":"SCMP_ACT_ERRNO"}` {
		t.Errorf("SeccompProfiles = %v", cfg.SeccompProfiles)
	}
}

const typeMetaDoc = "apiVersion: nodeshim.io/v1alpha1\nkind: ShimConfiguration\n"

func TestPayloadProfiles(t *testing.T) {
	tests := []struct {
		name    string
		files   []File
		want    map[string]string
		wantErr string
	}{
		{"none", []File{{BaseFile, []byte(typeMetaDoc)}}, nil, ""},
		{"inline map and drop-in", []File{
			{BaseFile, []byte(typeMetaDoc + "seccompProfiles: {a.json: '{}', b.json: x}\n")},
			{"10-a.conf", []byte(typeMetaDoc + "seccompProfiles: {b.json: null, c.json: cc}\n")},
		}, map[string]string{"a.json": "{}", "c.json": "cc"}, ""},
		{"directory and map", []File{
			{BaseFile, []byte(typeMetaDoc + "seccompProfiles: {a.json: '{}'}\n")},
			{"seccompProfiles/d/b.json", []byte("z")},
		}, map[string]string{"a.json": "{}", "d/b.json": "z"}, ""},
		{"both places", []File{
			{BaseFile, []byte(typeMetaDoc + "seccompProfiles: {a.json: '{}'}\n")},
			{"seccompProfiles/a.json", []byte("z")},
		}, nil, "seccompProfiles[a.json] is set both in the documents and as seccompProfiles/a.json"},
		{"not a string", []File{{BaseFile, []byte(typeMetaDoc + "seccompProfiles: {a.json: {defaultAction: x}}\n")}}, nil, "cannot unmarshal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Payload{Files: tt.files}.Load()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Load = %v, want error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.SeccompProfiles) != len(tt.want) {
				t.Fatalf("SeccompProfiles = %v, want %v", cfg.SeccompProfiles, tt.want)
			}
			for k, v := range tt.want {
				if cfg.SeccompProfiles[k] != v {
					t.Errorf("SeccompProfiles[%s] = %q, want %q", k, cfg.SeccompProfiles[k], v)
				}
			}
		})
	}
}

// TestProfilesFollowTheLifecycle: a profile is part of the payload, so a
// changed profile is a new payload that soaks, and one the daemon's check
// refuses is rolled back with the profiles of the last-known-good one.
func TestProfilesFollowTheLifecycle(t *testing.T) {
	f := newFixture(t)
	f.c.opts.Check = func(c ShimConfiguration) error {
		if strings.Contains(c.SeccompProfiles["p.json"], "bad") {
			return errors.New("seccompProfiles[p.json]: syscalls[0].action: unknown action")
		}
		return nil
	}
	sync := func(files map[string]string) string {
		t.Helper()
		dir := f.source
		os.RemoveAll(dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		writeProfilesSource(t, dir, files)
		if err := f.c.Sync(); err != nil {
			t.Fatal(err)
		}
		p, err := ReadSource(dir)
		if err != nil {
			t.Fatal(err)
		}
		return short(p.UID())
	}
	A := sync(map[string]string{BaseFile: typeMetaDoc, "seccompProfiles/p.json": "good 1"})
	f.clock.Step(DefaultSoakPeriod)
	if err := f.c.Sync(); err != nil {
		t.Fatal(err)
	}
	f.expect("A good", A, A, A, "")
	B := sync(map[string]string{BaseFile: typeMetaDoc, "seccompProfiles/p.json": "good 2"})
	if B == A {
		t.Fatal("a changed profile did not change the payload's UID")
	}
	f.expect("B on trial", B, B, A, "")
	if got := f.c.Active().SeccompProfiles["p.json"]; got != "good 2" {
		t.Errorf("active profile %q", got)
	}
	f.clock.Step(DefaultSoakPeriod)
	if err := f.c.Sync(); err != nil {
		t.Fatal(err)
	}
	C := sync(map[string]string{BaseFile: typeMetaDoc, "seccompProfiles/p.json": "bad"})
	f.expect("C refused", C, B, B, "syscalls[0].action")
	if got := f.c.Active().SeccompProfiles["p.json"]; got != "good 2" {
		t.Errorf("active profile after a refused payload %q, want the last-known-good one", got)
	}
}
