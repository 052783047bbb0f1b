package nodevm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

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
	dockerfile := filepath.Join(root, "Dockerfile")
	data, err := os.ReadFile(dockerfile)
	if err != nil {
		return "", fmt.Errorf("nodeshim's image: %w", err)
	}
	vars := map[string]string{"VERSION": "v0.0.0-node", "COMMIT": "node"}
	var files []runtimetest.ImageFile
	for _, b := range []struct{ pkg, name string }{{"./cmd/nodeshim", "usr/bin/nodeshim"}, {"./cmd/nodeshim-reporter", "usr/bin/nodeshim-reporter"}} {
		env, args, err := dockerGoBuild(string(data), vars, b.pkg)
		if err != nil {
			return "", fmt.Errorf("nodeshim's image: %s: %w", dockerfile, err)
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
	programs, err := dockerArg(string(data), "CRIU_PROGRAMS")
	if err != nil {
		return "", fmt.Errorf("nodeshim's image: %s: %w", dockerfile, err)
	}
	libs, err := dockerArg(string(data), "CRIU_LIBS")
	if err != nil {
		return "", fmt.Errorf("nodeshim's image: %s: %w", dockerfile, err)
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

// dockerGoBuild finds the Dockerfile's RUN instruction whose `go build`
// ends with pkg and returns its environment assignments and go build's
// arguments, with ${VAR} expanded from vars.
func dockerGoBuild(dockerfile string, vars map[string]string, pkg string) (env, args []string, err error) {
	text := strings.ReplaceAll(dockerfile, "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		cmd, ok := strings.CutPrefix(strings.TrimSpace(line), "RUN ")
		if !ok || !strings.Contains(cmd, "go build") {
			continue
		}
		words, err := shellWords(os.Expand(cmd, func(k string) string { return vars[k] }))
		if err != nil {
			return nil, nil, err
		}
		if len(words) == 0 || words[len(words)-1] != pkg {
			continue
		}
		for i, w := range words {
			if w == "go" {
				if i+1 >= len(words) || words[i+1] != "build" {
					break
				}
				return words[:i], words[i+2:], nil
			}
			if !strings.Contains(w, "=") {
				return nil, nil, errors.New("unexpected word before go build: " + w)
			}
		}
	}
	return nil, nil, errors.New("no RUN ... go build ... " + pkg)
}

// dockerArg is the default value of the Dockerfile's `ARG name=value`,
// unquoted.
func dockerArg(dockerfile, name string) (string, error) {
	for _, line := range strings.Split(dockerfile, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "ARG "+name+"=")
		if !ok {
			continue
		}
		words, err := shellWords(v)
		if err != nil || len(words) != 1 {
			return "", fmt.Errorf("ARG %s=%s: want one word (%v)", name, v, err)
		}
		return words[0], nil
	}
	return "", errors.New("no ARG " + name + "=")
}

// shellWords splits a command line on blanks, honouring double and single
// quotes, which is all the Dockerfile's build commands use.
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, errors.New("unterminated quote in " + s)
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}
