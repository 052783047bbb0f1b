package profiles

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodeshim/nodeshim/internal/atomicfile"
	"github.com/nodeshim/nodeshim/kernel/seccomp"
	"github.com/nodeshim/nodeshim/shim/profiles/ociprofile"
)

// Installer installs a set of Localhost seccomp profiles under the
// kubelet's seccomp root and removes those it installed before that are no
// longer in the set. It owns only what its manifest lists.
type Installer struct {
	// Root is the kubelet's seccomp root, <kubelet root-dir>/seccomp, as
	// nodeshim sees it.
	Root string
	// StateDir holds the manifest; it is created with mode 0700.
	StateDir string
	// Parse describes the node the profiles are resolved for
	// (seccomp.NodeParseOptions).
	Parse seccomp.ParseOptions
	// Complain names the profiles of the set installed in complain mode
	// (seccomp.Complain): what they would deny is allowed and logged.
	Complain []string
	// Clock stamps the install times; the real clock when nil.
	Clock clock.PassiveClock
	// Logger receives what was written and removed; slog.Default() when nil.
	Logger *slog.Logger
	// Registry reads the profiles named by an oci:// reference (a
	// configured profile's content or a baseProfileName), each verified
	// against its trusted keys; with none, such profiles are refused
	// (ErrOCIBase).
	Registry *ociprofile.Client

	// crashPoint, when set, is called between the steps of Apply (tests).
	crashPoint func(step string)
}

// ProfileError is a configured profile that cannot be installed.
type ProfileError struct {
	// Name is the profile's name.
	Name string
	// JSONPath is where in the profile the (first) problem is, as
	// seccomp.FieldError names it: "syscalls[3].action"; empty for the
	// document as a whole or for a problem with the name or the file.
	JSONPath string
	// Err is the cause: seccomp's errors (several joined), ErrName,
	// seccomp.ErrCompile, ErrForeign, ErrSymlink or ErrNotDir.
	Err error
}

// Error names the profile and what is wrong with it, on one line.
func (e *ProfileError) Error() string {
	return fmt.Sprintf("seccomp profile %s: %s", e.Name, strings.ReplaceAll(e.Err.Error(), "\n", "; "))
}

// Unwrap returns the cause.
func (e *ProfileError) Unwrap() error { return e.Err }

// ErrForeign is wrapped when a configured profile's file exists and was not
// installed by nodeshim: it is never replaced.
var ErrForeign = errors.New("exists and was not installed by nodeshim")

// Check validates and compiles every profile of set (for the native
// architecture and the profile's own) and checks that none would replace
// a file nodeshim did not install. It returns every problem, a
// *ProfileError each, joined in name order; nil when set can be applied.
func (in *Installer) Check(set map[string]string) error {
	m, err := in.readManifest()
	if err != nil {
		return err
	}
	_, err = in.check(set, m)
	return err
}

// check is Check; it returns the content to install for each name of set
// too (the union with its bases for a profile that names a
// baseProfileName).
func (in *Installer) check(set map[string]string, m manifest) (map[string][]byte, error) {
	owned := map[string]bool{}
	for _, p := range m.Profiles {
		owned[p.Path] = true
	}
	r, err := openRoot(in.Root, false)
	if err != nil {
		return nil, err
	}
	if r != nil {
		defer r.close()
	}
	names := slices.Sorted(maps.Keys(set))
	content := make(map[string][]byte, len(set))
	var errs []error
	for _, name := range in.Complain {
		if _, ok := set[name]; !ok {
			errs = append(errs, &ProfileError{Name: name, Err: fmt.Errorf("%w: complain mode names a profile that is not configured", ErrName)})
		}
	}
	for i, name := range names {
		if err := CheckName(name); err != nil {
			errs = append(errs, &ProfileError{Name: name, Err: err})
			continue
		}
		if i+1 < len(names) && strings.HasPrefix(names[i+1], name+"/") {
			errs = append(errs, &ProfileError{Name: name, Err: fmt.Errorf("%w: it is also the directory of %s", ErrName, names[i+1])})
			continue
		}
		data, err := in.compile(name, set)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		content[name] = data
		if r == nil {
			continue // no root yet: nothing in the way
		}
		path := in.path(name)
		exists, err := r.check(name)
		switch {
		case err != nil:
			errs = append(errs, &ProfileError{Name: name, Err: err})
		case exists && !owned[path]:
			errs = append(errs, &ProfileError{Name: name, Err: fmt.Errorf("%s %w; remove it or give the profile another name", path, ErrForeign)})
		}
	}
	return content, errors.Join(errs...)
}

// compile parses one profile of set, stacks it on its bases, and compiles
// the result as the runtime will; it returns the content to install.
func (in *Installer) compile(name string, set map[string]string) ([]byte, error) {
	res, err := in.resolve(name, set)
	if err != nil {
		pe := &ProfileError{Name: name, Err: err}
		var fe *seccomp.FieldError
		if errors.As(err, &fe) {
			pe.JSONPath = fe.Path
		}
		return nil, pe
	}
	if slices.Contains(in.Complain, name) {
		if res, err = complain(res); err != nil {
			return nil, &ProfileError{Name: name, Err: err}
		}
	}
	if _, err := seccomp.Compile(res.profile, seccomp.CompileOptions{}); err != nil {
		return nil, &ProfileError{Name: name, Err: err}
	}
	return res.content, nil
}

func (in *Installer) path(name string) string {
	return filepath.Join(in.Root, filepath.FromSlash(name))
}

// Installed returns what the manifest lists: the profiles in place.
func (in *Installer) Installed() ([]Installed, error) {
	m, err := in.readManifest()
	return m.Profiles, err
}

// Apply makes the installed profiles the set: it checks the whole set
// first, and a set with any problem (Check's errors) installs nothing and
// leaves the profiles installed before in place. Otherwise each new or
// changed profile is written atomically (a container being created reads
// the old or the new content, never a torn file), and each profile
// nodeshim installed before that is not in set is removed, unless its
// content changed since (it is then left in place and no longer owned).
// It returns the installed profiles, as they are after the call, sorted
// by path.
//
// Every new file is first staged beside its target (a hidden file), and
// only when all are staged are they renamed into place, so that a full
// disk leaves the previous set whole. The manifest is rewritten before the
// first file is touched, owning everything about to change, and again at
// the end.
func (in *Installer) Apply(set map[string]string) ([]Installed, error) {
	log := in.Logger
	if log == nil {
		log = slog.Default()
	}
	clk := in.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	m, err := in.readManifest()
	if err != nil {
		return nil, err
	}
	content, err := in.check(set, m)
	if err != nil {
		return m.Profiles, err
	}
	in.cleanStaged(m)

	prev := map[string]Installed{}
	for _, p := range m.Profiles {
		prev[p.Path] = p
	}
	now := clk.Now().UTC().Truncate(time.Second)
	var next, write, remove []Installed
	var r *root
	if len(set) > 0 {
		if r, err = openRoot(in.Root, true); err != nil {
			return m.Profiles, err
		}
		defer r.close()
	}
	for _, name := range slices.Sorted(maps.Keys(set)) {
		data := content[name]
		e := Installed{Name: name, Path: in.path(name), SHA256: Hash(data), InstalledAt: now}
		if old, ok := prev[e.Path]; ok && old.SHA256 == e.SHA256 && r.hash(name) == e.SHA256 {
			e.InstalledAt = old.InstalledAt
		} else {
			write = append(write, e)
		}
		next = append(next, e)
	}
	for _, p := range m.Profiles {
		// Gone from the set, or installed under another root.
		if !slices.ContainsFunc(next, func(e Installed) bool { return e.Path == p.Path }) {
			remove = append(remove, p)
		}
	}
	if len(write) == 0 && len(remove) == 0 {
		return m.Profiles, nil
	}

	// Own everything about to change: the new contents, and the old
	// entries of what is removed (their hash guards the removal).
	intent := manifest{Profiles: append(slices.Clone(next), remove...)}
	if err := in.writeManifest(intent); err != nil {
		return m.Profiles, err
	}
	in.point("intent")

	// Every file below the root is reached through r without following a
	// symbolic link (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS): a link
	// put in the way since the check fails the install, naming it.
	staged := make([]string, 0, len(write))
	for _, e := range write {
		if err := r.stage(e.Name, content[e.Name]); err != nil {
			in.unstage(r, staged)
			return m.Profiles, fmt.Errorf("install seccomp profile %s: %w", e.Name, err)
		}
		staged = append(staged, e.Name)
		in.point("staged " + e.Name)
	}
	var errs []error
	for _, e := range write {
		if err := r.commit(e.Name); err != nil {
			errs = append(errs, fmt.Errorf("install seccomp profile %s: %w", e.Name, err))
			continue
		}
		log.Info("seccomp profile installed", "name", e.Name, "path", e.Path, "sha256", e.SHA256)
		in.point("renamed " + e.Name)
	}
	if len(errs) > 0 {
		in.unstage(r, staged)
		// The manifest still owns every path touched; the next Apply
		// finishes the job.
		return inPlace(intent.Profiles), errors.Join(errs...)
	}
	for _, p := range remove {
		switch h := hashInstalled(p); h {
		case "":
			// already gone
		case p.SHA256:
			if err := removeInstalled(p); err != nil {
				errs = append(errs, fmt.Errorf("remove seccomp profile %s: %w", p.Name, err))
				next = append(next, p) // still ours
				continue
			}
			log.Info("seccomp profile removed", "name", p.Name, "path", p.Path)
		default:
			log.Warn("seccomp profile no longer configured but changed since nodeshim installed it; left in place",
				"name", p.Name, "path", p.Path, "installed", p.SHA256, "found", h)
		}
		in.point("removed " + p.Name)
	}
	slices.SortFunc(next, func(a, b Installed) int { return strings.Compare(a.Path, b.Path) })
	if err := in.writeManifest(manifest{Profiles: next}); err != nil {
		return inPlace(intent.Profiles), err
	}
	in.point("done")
	return next, errors.Join(errs...)
}

func (in *Installer) point(step string) {
	if in.crashPoint != nil {
		in.crashPoint(step)
	}
}

// unstage removes the staged files of the names staged.
func (in *Installer) unstage(r *root, staged []string) {
	for _, name := range staged {
		r.unstage(name)
	}
}

// cleanStaged removes what an interrupted Apply staged: the staged files
// of the paths the manifest owns, and the temporary files an older
// nodeshim staged them with.
func (in *Installer) cleanStaged(m manifest) {
	for _, p := range m.Profiles {
		r, err := openRoot(rootOf(p), false)
		if err != nil || r == nil {
			continue
		}
		r.unstage(p.Name)
		r.close()
	}
}

// removeInstalled removes the file of an installed profile below its own
// root.
func removeInstalled(p Installed) error {
	r, err := openRoot(rootOf(p), false)
	if err != nil || r == nil {
		return err
	}
	defer r.close()
	return r.remove(p.Name)
}

// inPlace returns the entries whose file holds the content they record.
func inPlace(entries []Installed) []Installed {
	var out []Installed
	for _, e := range entries {
		if hashInstalled(e) == e.SHA256 {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b Installed) int { return strings.Compare(a.Path, b.Path) })
	return out
}

func (in *Installer) manifestPath() string { return filepath.Join(in.StateDir, ManifestFile) }

// readManifest reads the manifest; none means nothing installed.
func (in *Installer) readManifest() (manifest, error) {
	data, err := os.ReadFile(in.manifestPath())
	if errors.Is(err, fs.ErrNotExist) {
		return manifest{}, nil
	}
	if err != nil {
		return manifest{}, fmt.Errorf("read %s: %w", in.manifestPath(), err)
	}
	m, err := parseManifest(data)
	if err != nil {
		return manifest{}, fmt.Errorf("%s: %w", in.manifestPath(), err)
	}
	return m, nil
}

func (in *Installer) writeManifest(m manifest) error {
	if err := os.MkdirAll(in.StateDir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", in.StateDir, err)
	}
	if m.Profiles == nil {
		m.Profiles = []Installed{}
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", in.manifestPath(), err)
	}
	return atomicfile.WriteFile(in.manifestPath(), append(data, '\n'), 0o600)
}
