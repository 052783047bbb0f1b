// Package krew packages the kubectl plugin (cmd/kubectl-nodeshim) as krew
// installs plugins: one .tar.gz of the binary per platform, and the
// Plugin manifest (krew.googlecontainertools.github.com/v1alpha2) that
// names each archive by its URI and sha256. `make krew-plugin` writes
// both; the test installs them with krew itself.
package krew

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"regexp"
	"time"

	"sigs.k8s.io/yaml"
)

// Name is the plugin's name: `kubectl krew install nodeshim`, then
// `kubectl nodeshim`.
const Name = "nodeshim"

// Binary is the plugin's executable, in the archive and on PATH.
const Binary = "kubectl-nodeshim"

// Platform is one archive of the plugin: the os and arch it runs on
// (krew's selector labels), where it is fetched and its sha256.
type Platform struct {
	OS, Arch, URI, SHA256 string
}

// epoch is every archive entry's time, so that one binary makes one
// archive, byte for byte.
var epoch = time.Unix(0, 0).UTC()

// Archive writes the .tar.gz of the plugin binary at path to dst, and
// returns its sha256 in hex.
func Archive(dst io.Writer, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	h := sha256.New()
	gz := gzip.NewWriter(io.MultiWriter(dst, h))
	gz.ModTime = epoch
	tw := tar.NewWriter(gz)
	hdr := &tar.Header{Name: Binary, Mode: 0o755, Size: st.Size(), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return "", err
	}
	if _, err := io.Copy(tw, f); err != nil {
		return "", fmt.Errorf("archive %s: %w", path, err)
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := gz.Close(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// The manifest's shape: krew's v1alpha2 Plugin, the fields nodeshim uses.
type (
	manifest struct {
		APIVersion string       `json:"apiVersion"`
		Kind       string       `json:"kind"`
		Metadata   metadata     `json:"metadata"`
		Spec       manifestSpec `json:"spec"`
	}
	metadata struct {
		Name string `json:"name"`
	}
	manifestSpec struct {
		Version          string     `json:"version"`
		Homepage         string     `json:"homepage"`
		ShortDescription string     `json:"shortDescription"`
		Description      string     `json:"description"`
		Platforms        []platform `json:"platforms"`
	}
	platform struct {
		Selector selector `json:"selector"`
		URI      string   `json:"uri"`
		SHA256   string   `json:"sha256"`
		Bin      string   `json:"bin"`
		Files    []file   `json:"files"`
	}
	selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	}
	file struct {
		From string `json:"from"`
		To   string `json:"to"`
	}
)

// Homepage is the plugin's homepage in its manifest.
const Homepage = "https://github.com/nodeshim/nodeshim"

var (
	semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)
	sum    = regexp.MustCompile(`^[0-9a-f]{64}$`)
	word   = regexp.MustCompile(`^[a-z0-9]+$`)
)

// Manifest returns the plugin's manifest of version (semver with a "v",
// as krew requires) for platforms; an error names the first input krew
// would refuse.
func Manifest(version string, platforms []Platform) ([]byte, error) {
	if !semver.MatchString(version) {
		return nil, fmt.Errorf("version %q: krew wants a semantic version with a leading v, e.g. v0.1.0", version)
	}
	if len(platforms) == 0 {
		return nil, fmt.Errorf("no platform")
	}
	m := manifest{APIVersion: "krew.googlecontainertools.github.com/v1alpha2", Kind: "Plugin", Metadata: metadata{Name: Name},
		Spec: manifestSpec{Version: version, Homepage: Homepage,
			ShortDescription: "Checkpoint, restore, move and drain pods with their state",
			Description: "Checkpoints of pods as cluster objects, taken and restored by nodeshim on their nodes:\n" +
				"checkpoint a pod (PodCheckpoint), restore one into a new Pod under the restoring\n" +
				"RuntimeClass, move a pod to another node (PodMigration), and drain a node moving\n" +
				"the pods annotated migration.nodeshim.io/on-drain=migrate with their state.\n" +
				"Needs nodeshim's DaemonSet and controller in the cluster.\n"}}
	seen := map[string]bool{}
	for _, p := range platforms {
		switch {
		case !word.MatchString(p.OS) || !word.MatchString(p.Arch):
			return nil, fmt.Errorf("platform %q/%q: want an os and arch as GOOS and GOARCH name them", p.OS, p.Arch)
		case seen[p.OS+"/"+p.Arch]:
			return nil, fmt.Errorf("platform %s/%s given twice", p.OS, p.Arch)
		case p.URI == "":
			return nil, fmt.Errorf("platform %s/%s: no uri", p.OS, p.Arch)
		case !sum.MatchString(p.SHA256):
			return nil, fmt.Errorf("platform %s/%s: sha256 %q is not 64 hex digits", p.OS, p.Arch, p.SHA256)
		}
		seen[p.OS+"/"+p.Arch] = true
		m.Spec.Platforms = append(m.Spec.Platforms, platform{
			Selector: selector{MatchLabels: map[string]string{"os": p.OS, "arch": p.Arch}},
			URI:      p.URI, SHA256: p.SHA256, Bin: Binary,
			Files: []file{{From: Binary, To: "."}},
		})
	}
	return yaml.Marshal(m)
}
