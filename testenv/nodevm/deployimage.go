package nodevm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nodeshim/nodeshim/testenv/dockerfile"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/vmtest"
)

// NodeshimImage is the reference of nodeshim's own image on the node, which
// the DaemonSet scenario's kustomize overlay sets for deploy/'s "nodeshim"
// image (no registry is reachable from the node).
const NodeshimImage = "localhost/nodeshim/nodeshim:node"

// The Dockerfile's run stage puts CRIU's programs' loader and libraries at
// Debian's paths.
const (
	imageLoader = "/lib64/ld-linux-x86-64.so.2"
	imageLibDir = "/usr/lib/x86_64-linux-gnu"
)

// BuildNodeshimImage writes nodeshim's image as the Dockerfile makes it,
// built here and never on the node: its build stage's `go build` commands
// of ./cmd/nodeshim (static, cgo against libseccomp.a) and
// ./cmd/nodeshim-reporter, run with goCmd in root, and its criu stage's
// CRIU_PROGRAMS, loader and CRIU_LIBS taken from criuRoot (trixie's
// packages unpacked, mk/criu.mk), into an OCI image tar named
// NodeshimImage under dir, whose path it returns. The RuntimeClass
// handler's binaries of the Dockerfile are left out: no node scenario
// installs them.
func BuildNodeshimImage(ctx context.Context, run vmtest.Runner, root, goCmd, criuRoot, dir string) (string, error) {
	dockerfilePath := filepath.Join(root, "Dockerfile")
	data, err := os.ReadFile(dockerfilePath)
	if err != nil {
		return "", fmt.Errorf("nodeshim's image: %w", err)
	}
	vars := map[string]string{"VERSION": "v0.0.0-node", "COMMIT": "node"}
	var files []runtimetest.ImageFile
	for _, b := range []struct{ pkg, name string }{{"./cmd/nodeshim", "usr/bin/nodeshim"}, {"./cmd/nodeshim-reporter", "usr/bin/nodeshim-reporter"}} {
		env, args, err := dockerfile.GoBuild(string(data), vars, b.pkg)
		if err != nil {
			return "", fmt.Errorf("nodeshim's image: %s: %w", dockerfilePath, err)
		}
		out := filepath.Join(dir, filepath.Base(b.pkg))
		for i, a := range args {
			if a == "-o" && i+1 < len(args) {
				args[i+1] = out
			}
		}
		cmd := append(append(append([]string{}, env...), goCmd, "build"), args...)
		if _, err := run(ctx, root, "env", cmd...); err != nil {
			return "", fmt.Errorf("nodeshim's image: build %s: %w", b.pkg, err)
		}
		bin, err := os.ReadFile(out)
		if err != nil {
			return "", fmt.Errorf("nodeshim's image: %w", err)
		}
		files = append(files, runtimetest.ImageFile{Name: b.name, Mode: 0o755, Data: bin})
	}
	programs, err := dockerfile.Arg(string(data), "CRIU_PROGRAMS")
	if err != nil {
		return "", fmt.Errorf("nodeshim's image: %s: %w", dockerfilePath, err)
	}
	libs, err := dockerfile.Arg(string(data), "CRIU_LIBS")
	if err != nil {
		return "", fmt.Errorf("nodeshim's image: %s: %w", dockerfilePath, err)
	}
	paths := append(strings.Fields(programs), imageLoader)
	for _, l := range strings.Fields(libs) {
		paths = append(paths, filepath.Join(imageLibDir, l))
	}
	for _, p := range paths {
		src := filepath.Join(criuRoot, p)
		// dpkg -x keeps no merged-/usr links (/bin -> usr/bin).
		if _, err := os.Lstat(src); err != nil && !strings.HasPrefix(p, "/usr/") {
			src = filepath.Join(criuRoot, "usr", p)
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return "", fmt.Errorf("nodeshim's image: CRIU's %s: %w", p, err)
		}
		files = append(files, runtimetest.ImageFile{Name: strings.TrimPrefix(p, "/"), Mode: 0o755, Data: b})
	}
	path := filepath.Join(dir, "nodeshim.oci.tar")
	if err := runtimetest.WriteImage(path, NodeshimImage, files, []string{"/usr/bin/nodeshim"}, nil); err != nil {
		return "", fmt.Errorf("nodeshim's image: %w", err)
	}
	return path, nil
}
