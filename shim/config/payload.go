package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// BaseFile is the name of the base document in a configuration source;
// the other documents of the source are drop-ins named *.conf.
const BaseFile = "config.yaml"

// ProfilesDir is the directory of a configuration source that holds
// seccomp profiles, one file per profile, named (below it) as pods
// reference them; in a payload they are Files named "seccompProfiles/NAME".
// A ConfigMap puts files there with items paths
// ("path: seccompProfiles/audit.json").
const ProfilesDir = "seccompProfiles"

// Payload is the content of a configuration source: the base document and
// its drop-ins, sorted by name.
type Payload struct {
	Files []File `json:"files"`
}

// UID identifies a payload by content: the hex SHA-256 of its files' names
// and bytes. Two sources with the same documents have the same UID.
func (p Payload) UID() string {
	h := sha256.New()
	var n [8]byte
	for _, f := range p.Files {
		binary.BigEndian.PutUint64(n[:], uint64(len(f.Name)))
		h.Write(n[:])
		h.Write([]byte(f.Name))
		binary.BigEndian.PutUint64(n[:], uint64(len(f.Data)))
		h.Write(n[:])
		h.Write(f.Data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ReadSource reads the payload of a configuration source directory. When
// the directory is a ConfigMap volume (it has a ..data link), the files are
// read through one resolution of ..data, so that an atomic swap by kubelet
// during the read cannot mix two versions. Dotfiles and names other than
// config.yaml and *.conf are ignored, except the files below
// seccompProfiles/ (dotfiles and dot directories excepted there too).
func ReadSource(dir string) (Payload, error) {
	root := dir
	if target, err := filepath.EvalSymlinks(filepath.Join(dir, "..data")); err == nil {
		root = target
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return Payload{}, fmt.Errorf("read config source %s: %w", root, err)
	}
	var p Payload
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") || (n != BaseFile && !strings.HasSuffix(n, DropinSuffix)) {
			continue
		}
		path := filepath.Join(root, n)
		st, err := os.Stat(path)
		if err != nil {
			return Payload{}, fmt.Errorf("stat %s: %w", path, err)
		}
		if !st.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return Payload{}, fmt.Errorf("read %s: %w", path, err)
		}
		p.Files = append(p.Files, File{Name: n, Data: data})
	}
	profiles, err := readProfiles(root)
	if err != nil {
		return Payload{}, err
	}
	p.Files = append(p.Files, profiles...)
	sort.Slice(p.Files, func(i, j int) bool { return p.Files[i].Name < p.Files[j].Name })
	return p, nil
}

// readProfiles reads the regular files below root/seccompProfiles, if it
// exists, as Files named "seccompProfiles/NAME".
func readProfiles(root string) ([]File, error) {
	dir := filepath.Join(root, ProfilesDir)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var files []File
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		if path == dir {
			return nil
		}
		if strings.HasPrefix(e.Name(), ".") {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if e.IsDir() {
			return nil
		}
		st, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("stat %s: %w", path, err)
		}
		if !st.Mode().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		files = append(files, File{Name: filepath.ToSlash(rel), Data: data})
		return nil
	})
	return files, err
}

// Load merges the payload onto Defaults (base first, then the drop-ins in
// byte order) and validates the result. Every non-empty document must say
// apiVersion nodeshim.io/v1alpha1 and kind ShimConfiguration.
func (p Payload) Load() (ShimConfiguration, error) {
	return p.LoadOnto(Defaults())
}

// LoadOnto is Load with defaults in place of Defaults(): the running
// daemon's defaults carry its start-up settings (root dir, lock file).
func (p Payload) LoadOnto(defaults ShimConfiguration) (ShimConfiguration, error) {
	var base *File
	var dropins []File
	profiles := map[string]string{}
	for i, f := range p.Files {
		switch {
		case f.Name == BaseFile:
			base = &p.Files[i]
		case strings.HasPrefix(f.Name, ProfilesDir+"/"):
			profiles[strings.TrimPrefix(f.Name, ProfilesDir+"/")] = string(f.Data)
		default:
			dropins = append(dropins, f)
		}
	}
	if base == nil {
		return ShimConfiguration{}, fmt.Errorf("%w %s", ErrNoBase, BaseFile)
	}
	// An empty base is what a truncated write leaves: taking it for the
	// defaults would turn every setting off in silence. Drop-ins may be
	// empty (below): each only adds to the base.
	if empty, err := isEmptyDocument(base.Data); err == nil && empty {
		return ShimConfiguration{}, fmt.Errorf("%s: %w", base.Name, ErrEmptyBase)
	}
	files := append([]File{*base}, dropins...)
	for _, f := range files {
		if err := checkTypeMeta(f); err != nil {
			return ShimConfiguration{}, err
		}
	}
	cfg, err := Merge(defaults, files...)
	if err != nil {
		return ShimConfiguration{}, err
	}
	for _, name := range slices.Sorted(maps.Keys(profiles)) {
		if _, ok := cfg.SeccompProfiles[name]; ok {
			return ShimConfiguration{}, &ValidationError{Problems: []string{
				fmt.Sprintf("seccompProfiles[%s] is set both in the documents and as %s/%s", name, ProfilesDir, name)}}
		}
		if cfg.SeccompProfiles == nil {
			cfg.SeccompProfiles = map[string]string{}
		}
		cfg.SeccompProfiles[name] = profiles[name]
	}
	if err := cfg.Validate(); err != nil {
		return ShimConfiguration{}, err
	}
	return cfg, nil
}

// ErrTypeMeta is returned, wrapped with the file's name, for a document
// with a missing or foreign apiVersion or kind.
var ErrTypeMeta = errors.New("wrong apiVersion or kind")

func checkTypeMeta(f File) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(f.Data, &tm); err != nil {
		return fmt.Errorf("%s: %w", f.Name, err)
	}
	if tm == (metav1.TypeMeta{}) {
		// An empty drop-in changes nothing (LoadOnto refuses an empty base
		// before this).
		if empty, err := isEmptyDocument(f.Data); err == nil && empty {
			return nil
		}
	}
	if tm.APIVersion != APIVersion || tm.Kind != Kind {
		return fmt.Errorf("%s: %w: apiVersion %q kind %q, want %q %q", f.Name, ErrTypeMeta, tm.APIVersion, tm.Kind, APIVersion, Kind)
	}
	return nil
}

// isEmptyDocument reports whether data holds no YAML value: nothing,
// whitespace, comments or a bare document marker.
func isEmptyDocument(data []byte) (bool, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return true, nil // tabs, which YAML refuses as indentation, too
	}
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return false, err
	}
	s := strings.TrimSpace(string(j))
	return s == "" || s == "null", nil
}
