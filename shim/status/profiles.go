package status

import (
	"slices"
	"time"
)

// TypeSeccompProfiles is True when the Localhost seccomp profiles of the
// active configuration are installed under the kubelet's seccomp root.
const TypeSeccompProfiles = "SeccompProfilesReady"

// TypeSeccompProfilesDrift is True while every installed profile holds
// what nodeshim wrote, and False for a while after one was edited or
// removed on the node and put back.
const TypeSeccompProfilesDrift = "SeccompProfilesUnchanged"

// SeccompProfiles are the Localhost seccomp profiles nodeshim installed
// and owns.
type SeccompProfiles struct {
	// Root is the kubelet's seccomp root they are installed under, as
	// nodeshim sees it.
	Root string `json:"root"`
	// Installed lists them by name.
	Installed []InstalledProfile `json:"installed"`
	// Repairs are the recent changes found on the node and put back,
	// oldest first.
	Repairs []ProfileRepair `json:"repairs,omitempty"`
}

// ProfileRepair is an installed profile found changed on the node.
type ProfileRepair struct {
	Name string `json:"name"`
	Path string `json:"path"`
	// Change is "edited" or "removed"; FoundSHA256 the SHA-256 of what
	// the file held, for an edit.
	Change      string `json:"change"`
	FoundSHA256 string `json:"foundSHA256,omitempty"`
	// At is when it was found; Restored whether the configured content
	// was written back.
	At       time.Time `json:"at"`
	Restored bool      `json:"restored"`
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
	p.Repairs = slices.Clone(p.Repairs)
	if p.Installed == nil {
		p.Installed = []InstalledProfile{}
	}
	m.mu.Lock()
	m.profiles = &p
	m.bumpLocked()
	m.mu.Unlock()
}
