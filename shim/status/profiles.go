package status

import (
	"slices"
	"time"
)

// TypeSeccompProfiles is True when the Localhost seccomp profiles of the
// active configuration are installed under the kubelet's seccomp root.
const TypeSeccompProfiles = "SeccompProfilesReady"

// SeccompProfiles are the Localhost seccomp profiles nodeshim installed
// and owns.
type SeccompProfiles struct {
	// Root is the kubelet's seccomp root they are installed under, as
	// nodeshim sees it.
	Root string `json:"root"`
	// Installed lists them by name.
	Installed []InstalledProfile `json:"installed"`
}

// InstalledProfile is one Localhost profile nodeshim installed.
type InstalledProfile struct {
	// Name is the profile as pods reference it (localhostProfile),
	// relative to the seccomp root; Path is the file.
	Name string `json:"name"`
	Path string `json:"path"`
	// SHA256 is the hex SHA-256 of the file's content.
	SHA256 string `json:"sha256"`
	// InstalledAt is when this content was written.
	InstalledAt time.Time `json:"installedAt"`
}

// SetSeccompProfiles records the installed seccomp profiles.
func (m *Model) SetSeccompProfiles(p SeccompProfiles) {
	p.Installed = slices.Clone(p.Installed)
	if p.Installed == nil {
		p.Installed = []InstalledProfile{}
	}
	m.mu.Lock()
	m.profiles = &p
	m.bumpLocked()
	m.mu.Unlock()
}
