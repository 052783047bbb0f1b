package restoring

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// maxSpecSize bounds the bundle's config.json as it is read.
const maxSpecSize = 16 << 20

// RestoreSuffix is appended to the wrapper's path to name the restoring
// binary it execs for a create that restores (nodeshim-runc-restore
// beside nodeshim-runc).
const RestoreSuffix = "-restore"

// Wrapper is the runc-compatible front: every call goes to the runtime
// by exec(2), except the create of a container whose spec names a
// checkpoint (handed to the restoring binary, also by exec(2)) and the
// start and delete of a container that binary restored.
type Wrapper struct {
	Config Config
	// Runtime is the resolved path of Config.Runtime.
	Runtime string
	// Restorer is the restoring binary's path.
	Restorer string
	// Stderr receives what goes wrong before an exec.
	Stderr io.Writer
	// Exec replaces the process; syscall.Exec when nil.
	Exec func(argv0 string, argv, envv []string) error
	// Env is the environment passed on.
	Env []string
}

// NewWrapper loads the config beside exe and resolves the runtime.
func NewWrapper(exe string) (*Wrapper, error) {
	cfg, rt, err := Load(exe)
	if err != nil {
		return nil, err
	}
	return &Wrapper{Config: cfg, Runtime: rt, Restorer: exe + RestoreSuffix, Stderr: os.Stderr, Env: os.Environ()}, nil
}

// Load reads the config of the wrapper installed at exe (or of its
// restoring binary: exe without RestoreSuffix) and resolves its runtime.
func Load(exe string) (Config, string, error) {
	exe = strings.TrimSuffix(exe, RestoreSuffix)
	cfg, err := LoadConfig(ConfigPath(exe), exe)
	if err != nil {
		return cfg, "", err
	}
	rt, err := exec.LookPath(cfg.Runtime)
	if err != nil {
		return cfg, "", fmt.Errorf("find the runtime %q: %w", cfg.Runtime, err)
	}
	return cfg, rt, nil
}

// Main runs the call args (os.Args[1:]) and returns the exit code, when
// it does not exec.
func (w *Wrapper) Main(args []string) int {
	call, err := ParseCall(args)
	if err != nil {
		// A create the wrapper cannot read whose bundle names a
		// checkpoint must not start fresh: the restoring binary refuses
		// it, naming the command line. Anything else is not the
		// wrapper's to judge: the runtime says what is wrong.
		if call.Command == "create" && w.restores(Call{Bundle: BundleArg(args)}) {
			return w.exec(w.Restorer, args)
		}
		return w.exec(w.Runtime, args)
	}
	switch call.Command {
	case "create":
		if w.restores(call) {
			return w.exec(w.Restorer, args)
		}
	case "start":
		if _, err := os.Stat(MarkerPath(call.Root, w.Runtime, call.ID)); err == nil {
			// Restored at create: its process runs already.
			return 0
		}
	case "delete":
		// Before the runtime removes the state directory, which must be
		// as the runtime left it (crun removes only its own files).
		if err := os.Remove(MarkerPath(call.Root, w.Runtime, call.ID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			Fail(w.Stderr, call, fmt.Errorf("remove the restore marker of %s: %w", call.ID, err))
			return 1
		}
	}
	return w.exec(w.Runtime, args)
}

func (w *Wrapper) exec(bin string, args []string) int {
	ex := w.Exec
	if ex == nil {
		ex = syscall.Exec
	}
	err := ex(bin, append([]string{bin}, args...), w.Env)
	fmt.Fprintf(w.Stderr, "nodeshim-runc: exec %s: %v\n", bin, err)
	return 1
}

// restores says whether the create call is for the restoring binary: its
// bundle's config.json has AnnotationCheckpoint. The bytes decide alone
// in the common case, without decoding; the restoring binary decodes the
// spec and passes a pod's sandbox on to the runtime.
func (w *Wrapper) restores(call Call) bool {
	bundle := call.Bundle
	if bundle == "" {
		bundle = "."
	}
	b, err := readBounded(filepath.Join(bundle, "config.json"), maxSpecSize)
	return err == nil && bytes.Contains(b, []byte(AnnotationCheckpoint))
}

// BundleArg is the value of the last --bundle (or -b) in args, "" when
// there is none: found without parsing the command line.
func BundleArg(args []string) string {
	b := ""
	for i, a := range args {
		switch {
		case (a == "--bundle" || a == "-b") && i+1 < len(args):
			b = args[i+1]
		case strings.HasPrefix(a, "--bundle="):
			b = strings.TrimPrefix(a, "--bundle=")
		case strings.HasPrefix(a, "-b="):
			b = strings.TrimPrefix(a, "-b=")
		}
	}
	return b
}

// MarkerPath is the restore marker (MarkerName) of container id under
// the runtime's state root: its --root, else its default.
func MarkerPath(root, runtime, id string) string {
	if root == "" {
		root = "/run/runc"
		if strings.Contains(filepath.Base(runtime), "crun") {
			root = "/run/crun"
		}
	}
	return filepath.Join(root, id, MarkerName)
}

// Fail reports err where the shim looks for it: the runtime's log (as
// runc writes it, whose last error the shim puts in its own message) and
// stderr.
func Fail(stderr io.Writer, call Call, err error) {
	msg := "nodeshim-runc: " + err.Error()
	fmt.Fprintln(stderr, msg)
	Log(call, "error", msg)
}

// Log appends one record to the runtime's --log file, if the shim gave
// one, in its --log-format (runc's JSON lines, or logfmt text). The file
// is the shim's, which reads it after the call.
func Log(call Call, level, msg string) {
	if call.Log == "" {
		return
	}
	f, err := os.OpenFile(call.Log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	now := time.Now().UTC().Format(time.RFC3339Nano)
	if call.LogFormat == "json" {
		b, _ := json.Marshal(map[string]string{"level": level, "msg": msg, "time": now})
		_, _ = f.Write(append(b, '\n'))
		return
	}
	fmt.Fprintf(f, "time=%q level=%s msg=%q\n", now, level, msg)
}

func readBounded(p string, max int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", p, max)
	}
	return b, nil
}
