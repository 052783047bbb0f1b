package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/shim/profiles"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

const (
	allowProfile = `{"defaultAction":"SCMP_ACT_ALLOW"}`
	denyProfile  = `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["read","write","exit_group"],"action":"SCMP_ACT_ALLOW"}]}`
)

func installedNames(doc status.Document) string {
	if doc.SeccompProfiles == nil {
		return "<none>"
	}
	var n []string
	for _, p := range doc.SeccompProfiles.Installed {
		n = append(n, p.Name)
	}
	return strings.Join(n, " ")
}

// TestSeccompProfilesDelivered: the profiles of the configuration (inline
// and in the source's seccompProfiles/ directory) are installed under the
// kubelet's seccomp root and listed in the status document; a payload with
// a bad profile is refused naming the profile and the JSON path, the
// installed ones staying; a profile no longer configured is removed.
func TestSeccompProfilesDelivered(t *testing.T) {
	testutil.RequireRoot(t)
	d := startDaemonWith(t, func(o *Options) {
		// Each payload is last-known-good as soon as it is active, so that
		// a refused one rolls back to the previous payload, not to the
		// defaults.
		o.SoakPeriod = time.Nanosecond
		dir := filepath.Join(o.ConfigSource, "seccompProfiles", "team")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "deny.json"), []byte(denyProfile), 0o644); err != nil {
			t.Fatal(err)
		}
		writeSource(t, o.ConfigSource, typeMeta+"seccompProfiles:\n  audit.json: '"+allowProfile+"'\n")
	})
	root := filepath.Join(d.opts.HostRoot, "var/lib/kubelet/seccomp")
	doc := d.wait(t, func(doc status.Document) bool {
		c := doc.Config
		return installedNames(doc) == "audit.json team/deny.json" && c != nil && c.LastKnownGood != nil && c.LastKnownGood.UID == c.Active.UID
	})
	for _, p := range doc.SeccompProfiles.Installed {
		data, err := os.ReadFile(filepath.Join(root, p.Name))
		if err != nil {
			t.Fatal(err)
		}
		if p.SHA256 != profiles.Hash(data) || p.Path != filepath.Join(root, p.Name) || p.InstalledAt.IsZero() {
			t.Errorf("document lists %+v for a file holding %q", p, data)
		}
	}
	if doc.SeccompProfiles.Root != root {
		t.Errorf("root %q, want %q", doc.SeccompProfiles.Root, root)
	}
	if c, _ := cond(doc, status.TypeSeccompProfiles); c.Status != condition.True || c.Reason != profiles.ReasonInstalled {
		t.Errorf("%s = %+v", status.TypeSeccompProfiles, c)
	}

	// A bad profile refuses the payload: nothing of it is installed.
	doc = d.assign(t, typeMeta+"seccompProfiles:\n  audit.json: '"+denyProfile+"'\n  bad.json: '{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{\"names\":[\"read\"],\"action\":\"SCMP_ACT_NOPE\"}]}'\n", false)
	if want := `seccomp profile bad.json: syscalls[0].action: unknown action "SCMP_ACT_NOPE"`; !strings.Contains(doc.Config.Error, want) {
		t.Errorf("config error %q, want %q", doc.Config.Error, want)
	}
	if c, _ := cond(doc, "ConfigHealthy"); c.Status != condition.False || !strings.Contains(c.Message, "bad.json: syscalls[0].action") {
		t.Errorf("ConfigHealthy = %+v", c)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "audit.json")); string(b) != allowProfile {
		t.Errorf("audit.json after a refused payload holds %q", b)
	}
	if _, err := os.Stat(filepath.Join(root, "bad.json")); err == nil {
		t.Error("bad.json installed")
	}

	// Fewer profiles: the one no longer configured goes, a foreign one stays.
	if err := os.WriteFile(filepath.Join(root, "theirs.json"), []byte(allowProfile), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(d.opts.ConfigSource, "seccompProfiles")); err != nil {
		t.Fatal(err)
	}
	d.assign(t, typeMeta+"seccompProfiles:\n  audit.json: '"+denyProfile+"'\n", true)
	doc = d.wait(t, func(doc status.Document) bool {
		return installedNames(doc) == "audit.json" && doc.SeccompProfiles.Installed[0].SHA256 == profiles.Hash([]byte(denyProfile))
	})
	if _, err := os.Stat(filepath.Join(root, "team/deny.json")); err == nil {
		t.Error("team/deny.json still installed")
	}
	if _, err := os.Stat(filepath.Join(root, "theirs.json")); err != nil {
		t.Errorf("a profile nodeshim did not install: %v", err)
	}
}
