package seccomp

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// DefaultSeccompRoot is where the kubelet looks for Localhost profiles:
// <root-dir>/seccomp with the kubelet's default --root-dir.
const DefaultSeccompRoot = "/var/lib/kubelet/seccomp"

// Effective is the seccomp profile a container runs under.
type Effective struct {
	Type corev1.SeccompProfileType `json:"type"`
	// LocalhostProfile is the profile as the pod spec names it, relative to
	// the seccomp root; Path is where it is on the node.
	LocalhostProfile string `json:"localhostProfile,omitempty"`
	Path             string `json:"path,omitempty"`
	// Source says which setting decided: "container", "pod",
	// "privileged" or "default".
	Source string `json:"source"`
}

// KubeletOptions are the kubelet settings that shape the effective profile.
type KubeletOptions struct {
	// SeccompRoot is <kubelet root-dir>/seccomp; empty means
	// DefaultSeccompRoot.
	SeccompRoot string
	// SeccompDefault is the kubelet's seccompDefault setting: containers
	// with no profile at all run RuntimeDefault instead of Unconfined.
	SeccompDefault bool
}

// ErrLocalhostProfile is wrapped when a Localhost profile name is missing,
// absolute or escapes the seccomp root.
var ErrLocalhostProfile = errors.New("invalid localhostProfile")

// EffectiveProfile returns the profile the kubelet asks the runtime to run a
// container under: a privileged container always runs Unconfined; otherwise
// the container's own seccompProfile wins, an unset one inherits the pod's,
// and with neither set the kubelet's seccompDefault decides between
// RuntimeDefault and Unconfined. A Localhost profile resolves relative to the
// seccomp root and must stay inside it.
func EffectiveProfile(pod *corev1.PodSecurityContext, ctr *corev1.SecurityContext, opts KubeletOptions) (Effective, error) {
	if ctr != nil && ctr.Privileged != nil && *ctr.Privileged {
		return Effective{Type: corev1.SeccompProfileTypeUnconfined, Source: "privileged"}, nil
	}
	var sp *corev1.SeccompProfile
	source := ""
	switch {
	case ctr != nil && ctr.SeccompProfile != nil:
		sp, source = ctr.SeccompProfile, "container"
	case pod != nil && pod.SeccompProfile != nil:
		sp, source = pod.SeccompProfile, "pod"
	default:
		if opts.SeccompDefault {
			return Effective{Type: corev1.SeccompProfileTypeRuntimeDefault, Source: "default"}, nil
		}
		return Effective{Type: corev1.SeccompProfileTypeUnconfined, Source: "default"}, nil
	}
	switch sp.Type {
	case corev1.SeccompProfileTypeRuntimeDefault, corev1.SeccompProfileTypeUnconfined:
		return Effective{Type: sp.Type, Source: source}, nil
	case corev1.SeccompProfileTypeLocalhost:
		root := opts.SeccompRoot
		if root == "" {
			root = DefaultSeccompRoot
		}
		if sp.LocalhostProfile == nil || *sp.LocalhostProfile == "" {
			return Effective{}, fmt.Errorf("%s seccompProfile: %w: must be set when type is Localhost", source, ErrLocalhostProfile)
		}
		name := *sp.LocalhostProfile
		path, err := localhostPath(root, name)
		if err != nil {
			return Effective{}, fmt.Errorf("%s seccompProfile: %w", source, err)
		}
		return Effective{Type: sp.Type, LocalhostProfile: name, Path: path, Source: source}, nil
	}
	return Effective{}, fmt.Errorf("%s seccompProfile: unknown type %q", source, sp.Type)
}

// localhostPath joins name to root, refusing absolute names and any ".."
// element, as the API server's validation does.
func localhostPath(root, name string) (string, error) {
	if filepath.IsAbs(name) {
		return "", fmt.Errorf("%w %q: must be relative to %s", ErrLocalhostProfile, name, root)
	}
	for _, part := range strings.Split(filepath.ToSlash(name), "/") {
		if part == ".." {
			return "", fmt.Errorf("%w %q: must not contain '..'", ErrLocalhostProfile, name)
		}
	}
	return filepath.Join(root, name), nil
}
