package ociprofile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"sigs.k8s.io/yaml"
)

// parseManifest decodes an image manifest (OCI, or Docker v2 for older
// cosign signatures) of at most MaxManifestBytes and MaxLayers layers. An
// index is refused: spoc pushes one manifest whose layers are the
// platforms.
func parseManifest(data []byte, what string) (ocispec.Manifest, error) {
	var m ocispec.Manifest
	if len(data) > MaxManifestBytes {
		return m, fmt.Errorf("%s: %w: %d bytes, more than %d", what, ErrTooLarge, len(data), MaxManifestBytes)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("%s: %w: %w", what, ErrMalformed, err)
	}
	switch m.MediaType {
	case MediaTypeManifest, MediaTypeDockerManifest:
	case MediaTypeIndex, "application/vnd.docker.distribution.manifest.list.v2+json":
		return m, fmt.Errorf("%s: %w: an index (%s), not a manifest", what, ErrNotProfile, m.MediaType)
	default:
		return m, fmt.Errorf("%s: %w: media type %q, want %s", what, ErrMalformed, m.MediaType, MediaTypeManifest)
	}
	if m.SchemaVersion != 2 {
		return m, fmt.Errorf("%s: %w: schemaVersion %d, want 2", what, ErrMalformed, m.SchemaVersion)
	}
	if len(m.Layers) > MaxLayers {
		return m, fmt.Errorf("%s: %w: %d layers, more than %d", what, ErrTooLarge, len(m.Layers), MaxLayers)
	}
	return m, nil
}

// ProfileFile is the layer's file name `spoc push` gives the profile of a
// platform (its profileName): "profile-<os>-<arch>[-<variant>].yaml".
func ProfileFile(os, arch, variant string) string {
	name := "profile"
	for _, part := range []string{os, arch, variant} {
		if part != "" {
			name += "-" + part
		}
	}
	return name + ".yaml"
}

// profileLayer picks the profile's layer out of a (verified) manifest as
// security-profiles-operator's pull does: the node's platform's file
// (by the layer's platform or its title), else DefaultProfileFile. It
// checks the layer's size against MaxProfileBytes before anything is
// fetched.
func profileLayer(data []byte, arch string) (ocispec.Descriptor, error) {
	m, err := parseManifest(data, "manifest")
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	var platform, fallback *ocispec.Descriptor
	var titles []string
	for i := range m.Layers {
		l := &m.Layers[i]
		title := l.Annotations[AnnotationTitle]
		titles = append(titles, fmt.Sprintf("%q", title))
		onNode := l.Platform != nil && l.Platform.OS == "linux" && l.Platform.Architecture == arch
		switch {
		case platform == nil && (onNode || title == ProfileFile("linux", arch, "")):
			platform = l
		case fallback == nil && title == DefaultProfileFile:
			fallback = l
		}
	}
	l := platform
	if l == nil {
		l = fallback
	}
	if l == nil {
		return ocispec.Descriptor{}, fmt.Errorf("%w: no layer titled %s or %s (%s set), only [%s]", ErrNotProfile,
			ProfileFile("linux", arch, ""), DefaultProfileFile, AnnotationTitle, strings.Join(titles, ", "))
	}
	if l.Size < 0 || l.Size > MaxProfileBytes {
		return ocispec.Descriptor{}, fmt.Errorf("layer %s (%s): %w: %d bytes, more than %d", l.Annotations[AnnotationTitle], l.Digest, ErrTooLarge, l.Size, MaxProfileBytes)
	}
	if err := l.Digest.Validate(); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("layer %s: %w: digest: %w", l.Annotations[AnnotationTitle], ErrMalformed, err)
	}
	return *l, nil
}

// SPO's API group; a SeccompProfile of any of its versions is read.
const spoGroup = "security-profiles-operator.x-k8s.io/"

// ConvertProfile turns the content of a profile layer, a
// security-profiles-operator SeccompProfile object in YAML (or JSON), into
// OCI runtime-spec seccomp JSON: its spec, which uses the runtime-spec's
// field names, baseProfileName included, less SPO's "disabled". Another
// kind of object (a SelinuxProfile, an AppArmorProfile, anything else) and
// a disabled profile are refused.
func ConvertProfile(data []byte) ([]byte, error) {
	if len(data) > MaxProfileBytes {
		return nil, fmt.Errorf("profile: %w: %d bytes, more than %d", ErrTooLarge, len(data), MaxProfileBytes)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("profile: %w: %w", ErrMalformed, err)
	}
	var obj struct {
		APIVersion string                     `json:"apiVersion"`
		Kind       string                     `json:"kind"`
		Spec       map[string]json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(js, &obj); err != nil {
		return nil, fmt.Errorf("profile: %w: %w", ErrNotProfile, err)
	}
	if obj.Kind != "SeccompProfile" || !strings.HasPrefix(obj.APIVersion, spoGroup) {
		return nil, fmt.Errorf("profile: %w: kind %q of %q, want a SeccompProfile of %s*", ErrNotProfile, obj.Kind, obj.APIVersion, spoGroup)
	}
	if obj.Spec == nil {
		return nil, fmt.Errorf("profile: %w: the SeccompProfile has no spec", ErrNotProfile)
	}
	if d, ok := obj.Spec["disabled"]; ok {
		if bytes.Equal(bytes.TrimSpace(d), []byte("true")) {
			return nil, fmt.Errorf("profile: %w: the SeccompProfile is disabled (spec.disabled)", ErrNotProfile)
		}
		delete(obj.Spec, "disabled")
	}
	out, err := json.MarshalIndent(obj.Spec, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("profile: %w: %w", ErrMalformed, err)
	}
	return append(out, '\n'), nil
}
