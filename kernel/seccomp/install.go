package seccomp

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodeshim/nodeshim/internal/atomicfile"
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
	// Profiles are not secret, and the runtime may read them as another user.
	if err := atomicfile.WriteFile(path, data, 0o644); err != nil {
		return "", fmt.Errorf("install %s: %w", name, err)
	}
	return path, nil
}
