package seccomp

import (
	"fmt"
	"os"
	"path/filepath"
)

// InstallLocalhost validates a profile and writes it to the node as the
// Localhost profile name (relative to seccompRoot, e.g. "profiles/audit.json"),
// so that pods can reference it. Nothing is written when the profile does
// not parse. The file is written next to its final path with O_EXCL, synced,
// renamed over the path (a container being created reads either the old or
// the new profile, never a torn one) and the directory is synced. It returns
// the path written.
func InstallLocalhost(seccompRoot, name string, data []byte, opts ParseOptions) (string, error) {
	if _, err := Parse(data, opts); err != nil {
		return "", fmt.Errorf("install %s: %w", name, err)
	}
	path, err := localhostPath(seccompRoot, name)
	if err != nil {
		return "", fmt.Errorf("install: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("install %s: %w", name, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return "", fmt.Errorf("install %s: %w", name, err)
	}
	committed := false
	defer func() {
		if !committed {
			os.Remove(tmp.Name())
		}
	}()
	// CreateTemp opens with O_EXCL and mode 0600; profiles are not secret
	// and the runtime may read them as another user.
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return "", fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return "", fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", fmt.Errorf("fsync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("rename %s to %s: %w", tmp.Name(), path, err)
	}
	committed = true
	d, err := os.Open(dir)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return "", fmt.Errorf("fsync %s: %w", dir, err)
	}
	return path, nil
}
