package profiles

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/shim/source/sourcetest"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestDriftRepaired: an installed profile edited on the node, then another
// removed, is found, reported (SeccompProfilesUnchanged False with the
// path and the change, and the status's repairs) and put back
// byte-identical from the configuration; once the hold is over the
// condition is True again.
func TestDriftRepaired(t *testing.T) {
	e := newEnv(t)
	in := e.installer("kubelet")
	in.Clock = nil // real install times
	set := map[string]string{"a.json": deny, "team/b.json": allow}
	m := status.New(nil)
	sourcetest.Run(t, m, &Source{Installer: in, Profiles: set, Check: 50 * time.Millisecond, DriftHold: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	waitCond := func(what string, reason string) status.Document {
		var d status.Document
		testutil.Eventually(t, what, func() error {
			d = m.Snapshot()
			c, ok := d.Condition(status.TypeSeccompProfilesDrift)
			if !ok || c.Reason != reason {
				return fmt.Errorf("condition %+v", c)
			}
			return nil
		})
		return d
	}
	waitCond("the profiles installed and watched", ReasonNoDrift)

	for _, tc := range []struct {
		name, change string
		do           func(path string) error
	}{
		{"a.json", ChangeEdited, func(p string) error { return os.WriteFile(p, []byte(allow), 0o644) }},
		{"team/b.json", ChangeRemoved, os.Remove},
	} {
		path := filepath.Join(in.Root, tc.name)
		if err := tc.do(path); err != nil {
			t.Fatal(err)
		}
		d := waitCond(tc.name+" "+tc.change+" and put back", ReasonRepaired)
		testutil.Eventually(t, tc.name+" restored byte-identical", func() error {
			got, err := os.ReadFile(path)
			if err != nil || string(got) != set[tc.name] {
				return fmt.Errorf("%s holds %q (%v)", path, got, err)
			}
			return nil
		})
		c, _ := d.Condition(status.TypeSeccompProfilesDrift)
		if c.Status != condition.False || c.Severity != condition.SeverityWarning || !strings.Contains(c.Message, path+" "+tc.change) {
			t.Errorf("condition %+v", c)
		}
		testutil.Eventually(t, "the repair of "+tc.name+" in the status", func() error {
			d := m.Snapshot()
			if d.SeccompProfiles == nil {
				return errors.New("no profiles in the status")
			}
			for _, r := range d.SeccompProfiles.Repairs {
				if r.Name == tc.name && r.Change == tc.change && r.Restored {
					return nil
				}
			}
			return fmt.Errorf("repairs %+v", d.SeccompProfiles.Repairs)
		})
		waitCond("the hold after "+tc.name, ReasonNoDrift)
	}
}

// TestCheckDrift: a file replaced by a symbolic link to the same content
// is an edit (nodeshim never reads through a link below the root).
func TestCheckDrift(t *testing.T) {
	e := newEnv(t)
	in := e.installer("kubelet")
	installed, err := in.Apply(map[string]string{"a.json": deny})
	if err != nil {
		t.Fatal(err)
	}
	if d := CheckDrift(installed); len(d) != 0 {
		t.Fatalf("drift right after install: %+v", d)
	}
	e.write("elsewhere.json", deny)
	path := installed[0].Path
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(e.dir, "elsewhere.json"), path); err != nil {
		t.Fatal(err)
	}
	if d := CheckDrift(installed); len(d) != 1 || d[0].Change != ChangeEdited {
		t.Fatalf("drift %+v, want the link found as an edit", d)
	}
}
