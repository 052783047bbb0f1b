package criu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// EnvCriu names the environment variable that points nodeshim at a criu
// binary (or a wrapper script that runs one) when no path is configured.
// `make` sets it to .tools/bin/criu.
const EnvCriu = "NODESHIM_CRIU"

// DefaultPath is where Find looks for criu last, after $NODESHIM_CRIU and
// PATH: where Debian's criu package and nodeshim's image (see the
// Dockerfile) install it, so that the DaemonSet's shim finds the image's
// CRIU without configuration, whatever PATH the pod runs with.
const DefaultPath = "/usr/sbin/criu"

// ErrNoBinary is returned, wrapped, when no criu binary can be found: the
// node lacks a tool the operation needs, errdefs.ErrNotSupported (not
// errdefs.ErrNotFound, which names a missing container or pod).
var ErrNoBinary = errdefs.New(errdefs.ErrNotSupported, "criu binary not found")

// ErrCheckFailed is returned, wrapped, when `criu check` fails; the error
// carries CRIU's own message.
var ErrCheckFailed = errors.New("criu check failed")

// Binary is one criu executable. Path may be a wrapper script that execs
// criu through a private loader; it must pass its arguments and inherited
// file descriptors through unchanged.
type Binary struct {
	// Path is the absolute path of the executable.
	Path string
	// Source says how Path was found: "configured", "$NODESHIM_CRIU",
	// "PATH" or "default" (DefaultPath).
	Source string
}

// Find locates criu: the configured path if not empty, else the value of
// $NODESHIM_CRIU (read through getenv), else `criu` on PATH, else
// DefaultPath. getenv may be nil for os.Getenv.
func Find(configured string, getenv func(string) string) (Binary, error) {
	return find(configured, getenv, DefaultPath)
}

// find is Find with the default path as a parameter.
func find(configured string, getenv func(string) string, defaultPath string) (Binary, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	check := func(p, src string) (Binary, error) {
		abs, err := filepath.Abs(p)
		if err != nil {
			return Binary{}, fmt.Errorf("criu path %s (%s): %w", p, src, err)
		}
		st, err := os.Stat(abs)
		if err != nil {
			return Binary{}, fmt.Errorf("criu path %s (%s): %w: %w", abs, src, ErrNoBinary, err)
		}
		if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
			return Binary{}, fmt.Errorf("criu path %s (%s) is not an executable file: %w", abs, src, ErrNoBinary)
		}
		return Binary{Path: abs, Source: src}, nil
	}
	if configured != "" {
		return check(configured, "configured")
	}
	if p := getenv(EnvCriu); p != "" {
		return check(p, "$"+EnvCriu)
	}
	p, err := exec.LookPath("criu")
	if err == nil {
		return check(p, "PATH")
	}
	b, derr := check(defaultPath, "default")
	if derr != nil {
		return Binary{}, fmt.Errorf("criu not configured, $%s unset, not on PATH (%w) and not at %s: %w", EnvCriu, err, defaultPath, ErrNoBinary)
	}
	return b, nil
}

// Version is a CRIU release, major.minor.sublevel.
type Version struct {
	Major, Minor, Sublevel int
}

// String formats v as CRIU prints it (4.1.1, or 4.1 without a sublevel).
func (v Version) String() string {
	if v.Sublevel == 0 {
		return fmt.Sprintf("%d.%d", v.Major, v.Minor)
	}
	return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Sublevel)
}

// AtLeast reports whether v is w or newer.
func (v Version) AtLeast(w Version) bool {
	if v.Major != w.Major {
		return v.Major > w.Major
	}
	if v.Minor != w.Minor {
		return v.Minor > w.Minor
	}
	return v.Sublevel >= w.Sublevel
}

var versionLine = regexp.MustCompile(`(?m)^Version:\s*(\d+)\.(\d+)(?:\.(\d+))?\s*$`)

// ParseVersion reads the output of `criu --version` ("Version: 4.1.1",
// possibly followed by a "GitID:" line).
func ParseVersion(out string) (Version, error) {
	m := versionLine.FindStringSubmatch(out)
	if m == nil {
		return Version{}, fmt.Errorf("no \"Version: X.Y[.Z]\" line in criu --version output %q", truncate(out, 200))
	}
	var v Version
	var err error
	if v.Major, err = strconv.Atoi(m[1]); err != nil {
		return Version{}, fmt.Errorf("criu major version %q: %w", m[1], err)
	}
	if v.Minor, err = strconv.Atoi(m[2]); err != nil {
		return Version{}, fmt.Errorf("criu minor version %q: %w", m[2], err)
	}
	if m[3] != "" {
		if v.Sublevel, err = strconv.Atoi(m[3]); err != nil {
			return Version{}, fmt.Errorf("criu sublevel %q: %w", m[3], err)
		}
	}
	return v, nil
}

// starter starts a command in place of cmd.Start, for instance from a
// thread with a mount namespace of its own (privateRun); nil is cmd.Start.
type starter func(cmd *exec.Cmd) error

// run runs the binary with args, started through start, and returns
// stdout and stderr together.
func (b Binary) run(ctx context.Context, start starter, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, b.Path, args...)
	// `criu check` puts an inotify watch on its working directory, which
	// costs in proportion to the directory's cached entries (negative
	// ones included): measured 37 ms of CPU from a busy /tmp against
	// 20-24 from /. Run it where that is small, whatever the caller's.
	cmd.Dir = "/"
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if start == nil {
		start = (*exec.Cmd).Start
	}
	err := start(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	return out.String(), err
}

// Version runs `criu --version`.
func (b Binary) Version(ctx context.Context) (Version, error) {
	return b.version(ctx, nil)
}

// version is Version with criu started through start.
func (b Binary) version(ctx context.Context, start starter) (Version, error) {
	out, err := b.run(ctx, start, "--version")
	if err != nil {
		return Version{}, fmt.Errorf("%s --version: %w: %s", b.Path, err, truncate(out, 300))
	}
	return ParseVersion(out)
}

// Check runs `criu check`. On success it returns CRIU's last line ("Looks
// good."); on failure an error wrapping ErrCheckFailed with CRIU's own
// error lines.
func (b Binary) Check(ctx context.Context) (string, error) {
	return b.check(ctx, nil)
}

// check is Check with criu started through start.
func (b Binary) check(ctx context.Context, start starter) (string, error) {
	out, err := b.run(ctx, start, "check")
	if err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("%s check: %w", b.Path, ctx.Err())
		}
		return "", fmt.Errorf("%s check: %w: %s", b.Path, ErrCheckFailed, CheckMessage(out))
	}
	return lastLine(out), nil
}

// CheckFeature runs `criu check --feature name`. It returns nil when CRIU
// says the feature is supported and an error with CRIU's message otherwise.
// (go-criu v7's Criu.FeatureCheck is not used: it echoes the request
// back; rpcChecks reads CRIU's answer itself.)
func (b Binary) CheckFeature(ctx context.Context, name string) error {
	return b.checkFeature(ctx, nil, name)
}

// checkFeature is CheckFeature with criu started through start.
func (b Binary) checkFeature(ctx context.Context, start starter, name string) error {
	out, err := b.run(ctx, start, "check", "--feature", name)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s check --feature %s: %w", b.Path, name, ctx.Err())
		}
		return fmt.Errorf("criu check --feature %s: %w: %s", name, ErrCheckFailed, CheckMessage(out))
	}
	return nil
}

// CheckMessage extracts the lines that explain a failed `criu check`:
// CRIU's "Error (...)" lines, else its warnings, else the last line.
func CheckMessage(out string) string {
	var errs, warns []string
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "Error"):
			errs = append(errs, l)
		case strings.HasPrefix(l, "Warn"):
			warns = append(warns, l)
		}
	}
	switch {
	case len(errs) > 0:
		return strings.Join(errs, "; ")
	case len(warns) > 0:
		return strings.Join(warns, "; ")
	}
	if l := lastLine(out); l != "" {
		return l
	}
	return "no output"
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
