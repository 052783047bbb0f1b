package podman

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nodeshim/nodeshim/criu"
)

// ErrNotPodmanArchive: the archive is not of a podman container, so podman
// cannot restore it.
var ErrNotPodmanArchive = errors.New("not a podman container's checkpoint archive")

// RestoreOptions configure Restore.
type RestoreOptions struct {
	// Podman is the podman binary; "podman" on PATH when empty.
	Podman string
	// GlobalFlags go before podman's subcommand (--root, --runroot, ...).
	GlobalFlags []string
	// Criu, when set, is put first on PATH for podman and its OCI runtime,
	// so that runc restores with the CRIU nodeshim checkpoints with (runc
	// runs "criu" from PATH).
	Criu criu.Binary
	// Env is podman's environment; os.Environ() when nil.
	Env []string
}

// Restored is a container podman brought back from an archive.
type Restored struct {
	// ID and Name are the container's.
	ID, Name string
	// Pid is its init process in the host pid namespace.
	Pid int
	// Took is podman's time to restore it.
	Took time.Duration
}

// Restore restores the podman container in archive on this node with
// `podman container restore --import`: podman creates the container from
// the archive's config.dump with its image, applies rootfs-diff.tar and
// deleted.files, and has runc restore the process tree with CRIU. An
// archive of another engine is refused with ErrNotPodmanArchive before
// podman runs. ctx bounds podman's commands.
func Restore(ctx context.Context, archive string, o RestoreOptions) (Restored, error) {
	f, err := os.Open(archive)
	if err != nil {
		return Restored{}, fmt.Errorf("open %s: %w", archive, err)
	}
	meta, err := criu.ReadArchiveMeta(f)
	f.Close()
	if err != nil {
		return Restored{}, fmt.Errorf("%s: %w", archive, err)
	}
	if meta.Engine != criu.EnginePodman {
		return Restored{}, fmt.Errorf("%s: archive of engine %q: %w", archive, meta.Engine, ErrNotPodmanArchive)
	}
	if o.Podman == "" {
		o.Podman = "podman"
	}
	env := o.Env
	if env == nil {
		env = os.Environ()
	}
	if o.Criu.Path != "" {
		dir, err := os.MkdirTemp("", "nodeshim-criu-")
		if err != nil {
			return Restored{}, fmt.Errorf("restore %s: %w", archive, err)
		}
		defer os.RemoveAll(dir)
		if err := os.Symlink(o.Criu.Path, filepath.Join(dir, "criu")); err != nil {
			return Restored{}, fmt.Errorf("restore %s: %w", archive, err)
		}
		env = withPath(env, dir)
	}
	run := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, o.Podman, append(append([]string{}, o.GlobalFlags...), args...)...)
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("podman %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
		}
		return strings.TrimSpace(stdout.String()), nil
	}
	start := time.Now()
	id, err := run("container", "restore", "--import", archive)
	if err != nil {
		return Restored{}, fmt.Errorf("restore %s: %w", archive, err)
	}
	r := Restored{ID: lastLine(id), Took: time.Since(start)}
	out, err := run("container", "inspect", "--format", "{{.State.Pid}} {{.Name}}", r.ID)
	if err != nil {
		return r, fmt.Errorf("restored %s from %s: %w", r.ID, archive, err)
	}
	pid, name, _ := strings.Cut(out, " ")
	if r.Pid, err = strconv.Atoi(pid); err != nil || r.Pid <= 0 {
		return r, fmt.Errorf("restored %s from %s: podman gives pid %q", r.ID, archive, pid)
	}
	r.Name = name
	return r, nil
}

// withPath returns env with dir first on PATH.
func withPath(env []string, dir string) []string {
	out := make([]string, 0, len(env)+1)
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
			continue
		}
		out = append(out, kv)
	}
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	return append(out, "PATH="+dir+string(os.PathListSeparator)+path)
}

// lastLine is the last line of s (podman may print warnings before the id).
func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return strings.TrimSpace(s[i+1:])
	}
	return s
}
