package seccomp

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestInstallLocalhost(t *testing.T) {
	root := filepath.Join(t.TempDir(), "seccomp")
	good, err := os.ReadFile("testdata/deny-mkdir.json")
	if err != nil {
		t.Fatal(err)
	}
	path, err := InstallLocalhost(root, "profiles/deny-mkdir.json", good, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(root, "profiles/deny-mkdir.json") {
		t.Errorf("path %s", path)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("%v %v", st, err)
	}
	// What a pod referencing it resolves to, and reads.
	e, err := EffectiveProfile(nil, &corev1.SecurityContext{SeccompProfile: sp(corev1.SeccompProfileTypeLocalhost, "profiles/deny-mkdir.json")}, KubeletOptions{SeccompRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	if e.Path != path {
		t.Fatalf("the pod resolves to %s, want the installed %s", e.Path, path)
	}
	if b, err := os.ReadFile(e.Path); err != nil || string(b) != string(good) {
		t.Fatalf("read back: %v", err)
	}

	tests := []struct {
		name    string
		file    string
		data    []byte
		wantErr error
	}{
		{"invalid profile", "profiles/deny-mkdir.json", []byte(`{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["x"],"action":"NOPE"}]}`), ErrUnknownAction},
		{"escape", "../etc/x.json", good, ErrLocalhostProfile},
		{"absolute", "/etc/x.json", good, ErrLocalhostProfile},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := InstallLocalhost(root, tc.file, tc.data, ParseOptions{}); !errors.Is(err, tc.wantErr) {
				t.Errorf("got %v, want %v", err, tc.wantErr)
			}
		})
	}
	// The invalid profile left the installed one alone, and no temp files.
	if b, err := os.ReadFile(path); err != nil || string(b) != string(good) {
		t.Errorf("installed profile changed: %v", err)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil || len(entries) != 1 {
		t.Errorf("directory holds %v (%v)", entries, err)
	}
}
