package deploy

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/testenv/dockerfile"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// dockerBuild returns the environment assignments and the arguments of the
// `go build` command of ./cmd/nodeshim in the Dockerfile's build stage, with
// ${VERSION} and ${COMMIT} expanded to the given values.
func dockerBuild(dockerfile string, vars map[string]string) (env, args []string, err error) {
	return dockerBuildOf(dockerfile, vars, "./cmd/nodeshim")
}

// dockerBuildOf is dockerBuild for the `go build` command whose last
// argument is pkg.
func dockerBuildOf(path string, vars map[string]string, pkg string) (env, args []string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	env, args, err = dockerfile.GoBuild(string(data), vars, pkg)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return env, args, nil
}

// buildReporter runs the Dockerfile's build command of nodeshim-reporter
// here (pure Go) and returns the binary's path.
func buildReporter(tb testing.TB, version, commit string) string {
	tb.Helper()
	env, args, err := dockerBuildOf("../Dockerfile", map[string]string{"VERSION": version, "COMMIT": commit}, "./cmd/nodeshim-reporter")
	if err != nil {
		tb.Fatal(err)
	}
	bin := filepath.Join(tb.TempDir(), "nodeshim-reporter")
	for i, a := range args {
		if a == "-o" && i+1 < len(args) {
			args[i+1] = bin
		}
	}
	build := exec.Command("go", append([]string{"build"}, args...)...)
	build.Dir, build.Env = "..", append(os.Environ(), env...)
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("go build %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return bin
}

// buildStatic runs the Dockerfile's build command here with VERSION and
// COMMIT set, and returns the static binary's path and what the link
// printed.
func buildStatic(t *testing.T, version, commit string) (string, []byte) {
	t.Helper()
	goBin := testutil.RequireBinary(t, "go")
	gcc := testutil.RequireBinary(t, "gcc")
	out, err := exec.Command(gcc, "-print-file-name=libseccomp.a").Output()
	if err != nil {
		t.Fatalf("gcc -print-file-name: %v", err)
	}
	if a := strings.TrimSpace(string(out)); !filepath.IsAbs(a) {
		testutil.Skip(t, "no static libseccomp.a (Debian's libseccomp-dev provides it): gcc answers %q", a)
	}
	env, args, err := dockerBuild("../Dockerfile", map[string]string{"VERSION": version, "COMMIT": commit})
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "nodeshim")
	for i, a := range args {
		if a == "-o" && i+1 < len(args) {
			args[i+1] = bin
		}
	}
	build := exec.Command(goBin, append([]string{"build"}, args...)...)
	build.Dir = ".."
	build.Env = append(os.Environ(), env...)
	out, err = build.CombinedOutput()
	if err != nil {
		t.Fatalf("go build %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return bin, out
}

// TestStaticBuild runs the Dockerfile's own build command here (cgo against
// Debian's libseccomp.a, netgo and osusergo, -extldflags -static) and checks
// that the result is a static executable in which libseccomp works: it has
// no ELF interpreter and no shared library dependency, prints the version it
// was stamped with, and runs a command under a seccomp profile that denies
// mkdir(2).
func TestStaticBuild(t *testing.T) {
	testutil.RequireRoot(t) // the seccomp exec step below installs a filter for real
	bin, out := buildStatic(t, "v0.0.0-static-test", "abc1234")
	if len(out) > 0 {
		// A static glibc link that uses NSS prints "Using 'getaddrinfo' in
		// statically linked applications requires at runtime the shared
		// libraries": netgo and osusergo must keep that away.
		t.Errorf("the static link printed warnings:\n%s", out)
	}

	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has an ELF interpreter (PT_INTERP): it is dynamically linked")
		}
		if p.Type == elf.PT_DYNAMIC {
			t.Error("the binary has a dynamic section (PT_DYNAMIC)")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		t.Errorf("read DT_NEEDED: %v", err)
	} else if len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v", libs)
	}

	v, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(v), "v0.0.0-static-test") || !strings.Contains(string(v), "abc1234") {
		t.Errorf("nodeshim version: %v: %s", err, v)
	}

	dir := filepath.Join(t.TempDir(), "denied")
	cmd := exec.Command(bin, "seccomp", "exec", "--profile", "../kernel/seccomp/testdata/deny-mkdir.json", "--", "mkdir", dir)
	out, err = cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("mkdir under deny-mkdir.json: %v, want exit status 1 (mkdir's failure): %s", err, out)
	}
	if !strings.Contains(string(out), "Permission denied") {
		t.Errorf("mkdir under deny-mkdir.json did not fail with EACCES: %s", out)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("mkdir under deny-mkdir.json created %s (stat: %v)", dir, err)
	}
}

// TestDockerBuildLinksNoReflectionTemplates: the Dockerfile's builds of
// nodeshim and nodeshim-reporter link neither golang.org/x/net/trace (gRPC
// links it unless built with grpcnotrace) nor html/template. Their pages
// call methods by name through reflection, and a binary that can do that
// keeps every exported method of every type it holds: 5.2 MB of nodeshim's
// 31.3 MB, mapped by every nodeshim process (BENCHMARKS.md, Footprint).
func TestDockerBuildLinksNoReflectionTemplates(t *testing.T) {
	goBin := testutil.RequireBinary(t, "go")
	for _, pkg := range []string{"./cmd/nodeshim", "./cmd/nodeshim-reporter"} {
		t.Run(strings.TrimPrefix(pkg, "./cmd/"), func(t *testing.T) {
			env, args, err := dockerBuildOf("../Dockerfile", nil, pkg)
			if err != nil {
				t.Fatal(err)
			}
			list := []string{"list", "-deps"}
			for i, a := range args {
				if a == "-tags" && i+1 < len(args) {
					list = append(list, a, args[i+1])
				} else if v, ok := strings.CutPrefix(a, "-tags="); ok {
					list = append(list, "-tags", v)
				}
			}
			cmd := exec.Command(goBin, append(list, pkg)...)
			cmd.Dir, cmd.Env = "..", append(os.Environ(), env...)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go %s %s: %v", strings.Join(list, " "), pkg, err)
			}
			deps := strings.Fields(string(out))
			if !slices.Contains(deps, "fmt") {
				t.Fatalf("go %s %s listed no standard package: %q", strings.Join(list, " "), pkg, out)
			}
			for _, bad := range []string{"golang.org/x/net/trace", "html/template"} {
				if slices.Contains(deps, bad) {
					t.Errorf("the Dockerfile's build of %s (%s) links %s", pkg, strings.Join(list[2:], " "), bad)
				}
			}
		})
	}
}

// TestContainerArgsParse runs the real nodeshim (nodeshim-reporter for the
// container that runs it) with each container's arguments from
// daemonset.yaml plus --help: cobra (or package flag) parses every flag
// before it prints the help, so an argument the binary does not know (a
// renamed flag, a typo) fails here rather than in a crash-looping pod.
func TestContainerArgsParse(t *testing.T) {
	goBin := testutil.RequireBinary(t, "go")
	bin := filepath.Join(t.TempDir(), "nodeshim")
	build := exec.Command(goBin, "build", "-o", bin, "./cmd/nodeshim")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// The image's second binary, the reporter's own (see the Dockerfile).
	reporterBin := filepath.Join(t.TempDir(), "nodeshim-reporter")
	build = exec.Command(goBin, "build", "-o", reporterBin, "./cmd/nodeshim-reporter")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	containers := slices.Concat(daemonSet(t).Spec.Template.Spec.Containers,
		deployment(t).Spec.Template.Spec.Containers)
	for _, c := range containers {
		t.Run(c.Name, func(t *testing.T) {
			if slices.Equal(c.Command, []string{"/usr/bin/nodeshim-reporter"}) {
				out, err := exec.Command(reporterBin, append(slices.Clone(c.Args), "--help")...).CombinedOutput()
				if err != nil || !strings.Contains(string(out), "Usage: nodeshim-reporter") {
					t.Fatalf("nodeshim-reporter %s --help: %v\n%s", strings.Join(c.Args, " "), err, out)
				}
				return
			}
			if len(c.Command) != 0 {
				t.Fatalf("container %s overrides the image's entrypoint with %v", c.Name, c.Command)
			}
			out, err := exec.Command(bin, append(slices.Clone(c.Args), "--help")...).CombinedOutput()
			if err != nil {
				t.Fatalf("nodeshim %s --help: %v\n%s", strings.Join(c.Args, " "), err, out)
			}
			if !strings.Contains(string(out), "nodeshim "+c.Args[0]) {
				t.Errorf("nodeshim %s --help printed no help for %s:\n%s", strings.Join(c.Args, " "), c.Args[0], out)
			}
		})
	}
}
