package profiles

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// ManifestFile is the name of the manifest in the state directory: the
// profiles nodeshim installed, which are the only files it ever replaces or
// removes under the seccomp root.
const ManifestFile = "installed.json"

// Installed is one profile nodeshim installed.
type Installed struct {
	// Name is the profile as pods reference it, relative to the seccomp
	// root; Path the file written, as nodeshim sees it.
	Name string `json:"name"`
	Path string `json:"path"`
	// SHA256 is the hex SHA-256 of the content written.
	SHA256 string `json:"sha256"`
	// InstalledAt is when that content was written.
	InstalledAt time.Time `json:"installedAt"`
}

// manifest is the on-disk record of what nodeshim installed. Before any
// file under the seccomp root is written or removed, the manifest is
// rewritten to own every path that will be touched, so that a crash at any
// point leaves nothing nodeshim wrote unowned.
type manifest struct {
	Profiles []Installed `json:"profiles"`
}

var sha256Pattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ErrManifest is wrapped by the errors of a manifest that does not decode.
var ErrManifest = errors.New("invalid profiles manifest")

// parseManifest decodes a manifest strictly: unknown fields, a path that is
// not absolute and clean, a bad name or hash, or a path listed twice make
// it invalid, since nodeshim must never remove a file on a guess.
func parseManifest(data []byte) (manifest, error) {
	var m manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return manifest{}, fmt.Errorf("%w: %w", ErrManifest, err)
	}
	if dec.More() {
		return manifest{}, fmt.Errorf("%w: data after the document", ErrManifest)
	}
	seen := map[string]bool{}
	for i, p := range m.Profiles {
		switch {
		case CheckName(p.Name) != nil:
			return manifest{}, fmt.Errorf("%w: profiles[%d].name: %w", ErrManifest, i, CheckName(p.Name))
		case !filepath.IsAbs(p.Path) || filepath.Clean(p.Path) != p.Path:
			return manifest{}, fmt.Errorf("%w: profiles[%d].path %q is not an absolute, clean path", ErrManifest, i, p.Path)
		case !strings.HasSuffix(p.Path, "/"+p.Name):
			return manifest{}, fmt.Errorf("%w: profiles[%d].path %q does not end in its name %q", ErrManifest, i, p.Path, p.Name)
		case !sha256Pattern.MatchString(p.SHA256):
			return manifest{}, fmt.Errorf("%w: profiles[%d].sha256 %q is not a hex SHA-256", ErrManifest, i, p.SHA256)
		case seen[p.Path]:
			return manifest{}, fmt.Errorf("%w: profiles[%d].path %q is listed twice", ErrManifest, i, p.Path)
		}
		seen[p.Path] = true
	}
	return m, nil
}

// ErrName is wrapped by the errors of CheckName.
var ErrName = errors.New("invalid profile name")

// CheckName checks a profile name: a relative, clean slash-separated path
// ("audit.json", "team/deny.json") whose elements are not empty, "." or
// "..", do not start with a dot (nodeshim's temporary files do) and fit a
// file name. Kubernetes refuses absolute names and ".." too; the rest keeps
// nodeshim's own files apart from the profiles.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrName)
	case !utf8.ValidString(name) || strings.ContainsRune(name, 0):
		return fmt.Errorf("%w %q: not valid UTF-8 text", ErrName, name)
	case strings.HasPrefix(name, "/"):
		return fmt.Errorf("%w %q: must be relative to the seccomp root", ErrName, name)
	case len(name) > 1024:
		return fmt.Errorf("%w %q: longer than 1024 bytes", ErrName, name)
	}
	for _, e := range strings.Split(name, "/") {
		switch {
		case e == "":
			return fmt.Errorf("%w %q: empty path element", ErrName, name)
		case e == "." || e == "..":
			return fmt.Errorf("%w %q: must not contain %q", ErrName, name, e)
		case strings.HasPrefix(e, "."):
			return fmt.Errorf("%w %q: an element starts with a dot", ErrName, name)
		case len(e) > 255:
			return fmt.Errorf("%w %q: an element is longer than 255 bytes", ErrName, name)
		}
	}
	return nil
}

// Hash is the hex SHA-256 of a profile's content, as the status lists it.
func Hash(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}
