package restoring

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// Defaults of Config.
const (
	// DefaultCheckpointDir is kubelet's checkpoint directory
	// (/var/lib/kubelet/checkpoints), where kubelet's Checkpoint API and
	// nodeshim's node API write archives.
	DefaultCheckpointDir = "/var/lib/kubelet/checkpoints"
	// DefaultWorkDir receives an archive's CRIU images for the length of
	// one restore.
	DefaultWorkDir = "/var/lib/nodeshim/restore"
	// DefaultReportCache is nodeshim serve's per-boot report cache under
	// its default root directory (the DaemonSet's --root-dir).
	DefaultReportCache = "/var/lib/nodeshim/report-cache"
	// DefaultRuntime is the OCI runtime every call goes to.
	DefaultRuntime = "runc"
	// maxConfigSize bounds the config file.
	maxConfigSize = 64 << 10
)

// ErrConfig: the wrapper's config file is unreadable or malformed.
var ErrConfig = errdefs.New(errdefs.ErrInvalidArgument, "invalid nodeshim-runc config")

// Config is the wrapper's configuration: a JSON file beside its binary
// (ConfigPath), every field optional.
type Config struct {
	// Runtime is the OCI runtime (runc or crun) that every call goes to:
	// a path, or a name looked up on PATH. Empty: the name the binary is
	// installed as, after "nodeshim-" (nodeshim-crun runs crun), else
	// DefaultRuntime.
	Runtime string `json:"runtime,omitempty"`
	// CheckpointDir is the one directory whose archives a Pod may name;
	// DefaultCheckpointDir when empty.
	CheckpointDir string `json:"checkpointDir,omitempty"`
	// WorkDir holds the unpacked images during a restore; DefaultWorkDir
	// when empty.
	WorkDir string `json:"workDir,omitempty"`
	// Criu is the CRIU binary the runtime restores with: an absolute path
	// of a file named criu, whose directory is put first on the runtime's
	// PATH (runc looks criu up there; runc 1.5 has no --criu flag); the
	// runtime's own PATH when empty.
	Criu string `json:"criu,omitempty"`
	// MaxBytes bounds what an archive may expand to (archive.Limits);
	// the archive package's default when zero.
	MaxBytes int64 `json:"maxBytes,omitempty"`
	// TrustPolicy, when set, is the trust policy file (package
	// criu/archive/seal) an archive's signature must satisfy before
	// anything in it is read; a pod checkpoint's manifest.json is
	// verified against it too. Empty: signatures are not checked.
	TrustPolicy string `json:"trustPolicy,omitempty"`
	// Identities are this node's age identity files, which decrypt an
	// encrypted archive. Without them an encrypted archive is refused.
	Identities []string `json:"identities,omitempty"`
	// ReportCache is the directory of nodeshim serve's per-boot report
	// cache (<rootDir>/report-cache), whose CRIU checks a restore compares
	// the checkpoint against without running CRIU; DefaultReportCache
	// when empty.
	ReportCache string `json:"reportCache,omitempty"`
	// LazyTLS are the files with which this node fetches a lazy pod
	// checkpoint's memory from the source node's CRIU page server over
	// mutual TLS (a manifest container's pageServer). Without it a lazy
	// checkpoint is refused: its memory never crosses the network in the
	// clear.
	LazyTLS *LazyTLS `json:"lazyTLS,omitempty"`
}

// LazyTLS are the PEM files of this node's side of a lazy migration's
// page transfer (CRIU's --tls-cacert, --tls-cert, --tls-key): the cluster
// CA that issued the source nodes' page-server certificates, and this
// node's certificate and key, which the source's page server checks
// against the same CA.
type LazyTLS struct {
	CACert string `json:"caCert"`
	Cert   string `json:"cert"`
	Key    string `json:"key"`
}

// ConfigPath is the config file of the wrapper installed at exe: exe
// with ".json" appended (/opt/nodeshim/bin/nodeshim-runc.json).
func ConfigPath(exe string) string { return exe + ".json" }

// LoadConfig reads the config file at path; a missing file is the zero
// Config. The defaults are filled in, the runtime's name after exe's
// name (see Config.Runtime).
func LoadConfig(path, exe string) (Config, error) {
	var c Config
	f, err := os.Open(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return c, fmt.Errorf("%w: %w", ErrConfig, err)
	default:
		b, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
		f.Close()
		if err != nil {
			return c, fmt.Errorf("%w: read %s: %w", ErrConfig, path, err)
		}
		if len(b) > maxConfigSize {
			return c, fmt.Errorf("%w: %s is larger than %d bytes", ErrConfig, path, maxConfigSize)
		}
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return c, fmt.Errorf("%w: %s: %w", ErrConfig, path, err)
		}
	}
	if c.Runtime == "" {
		c.Runtime = DefaultRuntime
		if n, ok := strings.CutPrefix(filepath.Base(exe), "nodeshim-"); ok && (n == "runc" || n == "crun") {
			c.Runtime = n
		}
	}
	if c.CheckpointDir == "" {
		c.CheckpointDir = DefaultCheckpointDir
	}
	if c.WorkDir == "" {
		c.WorkDir = DefaultWorkDir
	}
	if c.ReportCache == "" {
		c.ReportCache = DefaultReportCache
	}
	paths := []struct{ what, v string }{{"checkpointDir", c.CheckpointDir}, {"workDir", c.WorkDir}, {"reportCache", c.ReportCache}}
	if c.TrustPolicy != "" {
		paths = append(paths, struct{ what, v string }{"trustPolicy", c.TrustPolicy})
	}
	if c.Criu != "" {
		paths = append(paths, struct{ what, v string }{"criu", c.Criu})
		if filepath.Base(c.Criu) != "criu" {
			return c, fmt.Errorf("%w: criu %q: the runtime finds CRIU on PATH by the name criu; name a file called criu", ErrConfig, c.Criu)
		}
	}
	if t := c.LazyTLS; t != nil {
		for _, f := range []struct{ what, v string }{{"lazyTLS.caCert", t.CACert}, {"lazyTLS.cert", t.Cert}, {"lazyTLS.key", t.Key}} {
			if f.v == "" {
				return c, fmt.Errorf("%w: %s is empty; a lazy restore needs the CA certificate, this node's certificate and its key", ErrConfig, f.what)
			}
			paths = append(paths, f)
		}
	}
	for _, id := range c.Identities {
		paths = append(paths, struct{ what, v string }{"identities", id})
	}
	for _, p := range paths {
		if !filepath.IsAbs(p.v) {
			return c, fmt.Errorf("%w: %s %q is not an absolute path", ErrConfig, p.what, p.v)
		}
	}
	return c, nil
}
