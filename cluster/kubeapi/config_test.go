package kubeapi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(good, []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u
  user: {token: t}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(good)
	if err != nil || cfg.Host != "https://127.0.0.1:6443" || cfg.BearerToken != "t" {
		t.Errorf("LoadConfig(%s) = %+v, %v", good, cfg, err)
	}
	missing := filepath.Join(dir, "missing")
	if _, err := LoadConfig(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("LoadConfig of a missing file = %v, want the file named", err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := LoadConfig(""); err == nil || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Errorf("LoadConfig outside a pod = %v, want a hint at --kubeconfig", err)
	}
}
