package profiles

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/kernel/seccomp"
	"github.com/nodeshim/nodeshim/shim/profiles/ociprofile"
)

// OCIScheme starts a baseProfileName, or a configured profile's whole
// content, that names a profile in an OCI registry
// ("oci://registry/repo:tag"), read through Installer.Registry.
const OCIScheme = ociprofile.Scheme

// ErrOCIBase is wrapped when a profile names an oci:// reference and the
// installer has no registry client (no trusted key is configured).
var ErrOCIBase = errdefs.New(errdefs.ErrNotSupported, "oci:// profiles need a trusted public key (seccompRegistry.publicKeys)")

// resolved is a configured profile ready to install: content is what is
// written, the profile itself when it names no base and the union with its
// bases (as JSON) when it does.
type resolved struct {
	profile *seccomp.Profile
	content []byte
}

// resolve parses a configured profile and, when it names a
// baseProfileName, stacks it on its base (seccomp.ResolveBase). A base is,
// in this order: another profile of the set, by name; an absolute path of
// a file on the node; a profile already under the seccomp root, by name
// (read without following a symbolic link); an oci:// reference, read from
// its registry once its signature verifies (Installer.Registry). A
// profile whose whole content is an oci:// reference is that profile.
func (in *Installer) resolve(name string, set map[string]string) (resolved, error) {
	data := []byte(set[name])
	if ociprofile.IsReference(set[name]) {
		var err error
		if data, err = in.fetch(set[name]); err != nil {
			return resolved{}, err
		}
	}
	p, err := seccomp.ResolveBase(name, data, in.Parse, func(ref string) ([]byte, error) { return in.loadBase(ref, set) })
	if err != nil {
		return resolved{}, err
	}
	if !hasBase(data) {
		return resolved{profile: p, content: data}, nil
	}
	out, err := marshal(p)
	if err != nil {
		return resolved{}, fmt.Errorf("encode the union of %s and its base: %w", name, err)
	}
	return resolved{profile: p, content: out}, nil
}

// complain turns a resolved profile into its complain-mode form
// (seccomp.Complain), which is what is installed.
func complain(r resolved) (resolved, error) {
	p := seccomp.Complain(r.profile)
	out, err := marshal(p)
	if err != nil {
		return resolved{}, fmt.Errorf("encode the complain-mode profile: %w", err)
	}
	return resolved{profile: p, content: out}, nil
}

func marshal(p *seccomp.Profile) ([]byte, error) {
	out, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// hasBase reports whether data names a baseProfileName at its top level.
func hasBase(data []byte) bool {
	var top struct {
		Base string `json:"baseProfileName"`
	}
	return json.Unmarshal(data, &top) == nil && top.Base != ""
}

func (in *Installer) loadBase(ref string, set map[string]string) ([]byte, error) {
	if d, ok := set[ref]; ok {
		return []byte(d), nil
	}
	switch {
	case strings.HasPrefix(ref, OCIScheme):
		return in.fetch(ref)
	case filepath.IsAbs(ref):
		return readLimited(ref)
	}
	if err := CheckName(ref); err != nil {
		return nil, err
	}
	r, err := openRoot(in.Root, false)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, fmt.Errorf("%s: %w", in.path(ref), fs.ErrNotExist)
	}
	defer r.close()
	return r.read(ref)
}

// fetch reads the profile ref names from its registry, verified, as
// runtime-spec JSON.
func (in *Installer) fetch(ref string) ([]byte, error) {
	if in.Registry == nil {
		return nil, fmt.Errorf("%s: %w", strings.TrimSpace(ref), ErrOCIBase)
	}
	p, err := in.Registry.Fetch(context.Background(), ref)
	if err != nil {
		return nil, err
	}
	in.logger().Info("seccomp profile read from its registry, signature verified", "ref", p.Ref.String(),
		"manifest", p.Manifest.String(), "layer", p.Layer.Annotations[ociprofile.AnnotationTitle])
	return p.JSON, nil
}

func (in *Installer) logger() *slog.Logger {
	if in.Logger == nil {
		return slog.Default()
	}
	return in.Logger
}

// readLimited reads a base profile file, refusing one larger than
// seccomp.MaxProfileBytes.
func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, seccomp.MaxProfileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > seccomp.MaxProfileBytes {
		return nil, fmt.Errorf("%s: %w: larger than %d bytes", path, errdefs.ErrInvalidArgument, seccomp.MaxProfileBytes)
	}
	return data, nil
}
