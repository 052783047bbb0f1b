package restoring

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodeshim/nodeshim/internal/atomicfile"
)

// InstallFlag, as the only flag of nodeshim-runc, installs it instead of
// running a runtime call: `nodeshim-runc --nodeshim-install DIR`, run by
// the DaemonSet's init container with DIR on a host path.
const InstallFlag = "--nodeshim-install"

// Binaries are the files Install copies: the front and its restoring
// binary.
var Binaries = [...]string{"nodeshim-runc", "nodeshim-runc" + RestoreSuffix}

// Install copies the Binaries from srcDir into dir (created 0755 if
// missing), each replaced atomically (a temporary file beside it, fsync,
// rename): a runtime call that runs the old file meanwhile keeps it, the
// next one runs the new one, and none sees a partial file. The config
// file beside them is the operator's and is left alone.
func Install(srcDir, dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("install: %q is not an absolute path", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	for _, b := range Binaries {
		src := filepath.Join(srcDir, b)
		data, err := os.ReadFile(src)
		if err != nil {
			return fmt.Errorf("install: %w", err)
		}
		if err := atomicfile.WriteFile(filepath.Join(dir, b), data, 0o755); err != nil {
			return fmt.Errorf("install %s: %w", b, err)
		}
	}
	return nil
}
