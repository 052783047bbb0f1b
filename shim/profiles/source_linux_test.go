package profiles

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/shim/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// run runs src until the model shows a SeccompProfilesReady for which ok
// holds, then stops it.
func run(t *testing.T, src *Source, ok func(condition.Condition) bool) status.Document {
	t.Helper()
	m := status.New(nil)
	ch, unsubscribe := m.Subscribe(64)
	defer unsubscribe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, m) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	for tr := range ch {
		if tr.Condition.Type == status.TypeSeccompProfiles && ok(tr.Condition) {
			break
		}
	}
	return m.Snapshot()
}

func cond(doc status.Document) condition.Condition {
	for _, c := range doc.Conditions {
		if c.Type == status.TypeSeccompProfiles {
			return c
		}
	}
	return condition.Condition{}
}

func TestSource(t *testing.T) {
	e := newEnv(t)
	in := e.installer("kubelet")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	doc := run(t, &Source{Installer: in, Logger: quiet}, func(c condition.Condition) bool { return true })
	if c := cond(doc); c.Status != condition.True || c.Reason != ReasonNoProfiles {
		t.Errorf("no profiles: %+v", c)
	}
	if doc.SeccompProfiles == nil || len(doc.SeccompProfiles.Installed) != 0 || doc.SeccompProfiles.Root != in.Root {
		t.Errorf("no profiles: document %+v", doc.SeccompProfiles)
	}

	set := map[string]string{"a.json": allow, "team/b.json": deny}
	doc = run(t, &Source{Installer: in, Profiles: set, Logger: quiet}, func(c condition.Condition) bool { return true })
	if c := cond(doc); c.Status != condition.True || c.Reason != ReasonInstalled || !strings.Contains(c.Message, "a.json, team/b.json") {
		t.Errorf("installed: %+v", c)
	}
	got := doc.SeccompProfiles.Installed
	if len(got) != 2 || got[1].Name != "team/b.json" || got[1].SHA256 != Hash([]byte(deny)) ||
		got[1].Path != filepath.Join(in.Root, "team/b.json") || !got[1].InstalledAt.Equal(e.clock.Now().Truncate(time.Second)) {
		t.Errorf("installed profiles in the document: %+v", got)
	}

	// A bad profile: nothing of the set is installed, the condition names
	// the profile and the JSON path, the previous profiles stay listed.
	doc = run(t, &Source{Installer: in, Profiles: map[string]string{"a.json": bad}, Logger: quiet}, func(c condition.Condition) bool { return true })
	c := cond(doc)
	if c.Status != condition.False || c.Reason != ReasonInvalidProfile || c.Severity != condition.SeverityError ||
		!strings.Contains(c.Message, "seccomp profile a.json: syscalls[1].action: unknown action") ||
		!strings.Contains(c.Message, "the 2 installed before stay") {
		t.Errorf("bad profile: %+v", c)
	}
	if len(doc.SeccompProfiles.Installed) != 2 {
		t.Errorf("bad profile: document %+v", doc.SeccompProfiles)
	}

	// A foreign file in the way: retried until it is gone.
	foreign := filepath.Join(in.Root, "c.json")
	e.write("kubelet/seccomp/c.json", "theirs")
	src := &Source{Installer: in, Profiles: map[string]string{"c.json": allow}, Retry: time.Millisecond, Logger: quiet}
	removed := false
	doc = run(t, src, func(c condition.Condition) bool {
		if c.Reason == ReasonProfileConflict && !removed {
			if !strings.Contains(c.Message, foreign) {
				t.Errorf("conflict: %+v", c)
			}
			os.Remove(foreign)
			removed = true
		}
		return c.Status == condition.True
	})
	if got := doc.SeccompProfiles.Installed; len(got) != 1 || got[0].Name != "c.json" {
		t.Errorf("after the conflict: %+v", got)
	}
}
