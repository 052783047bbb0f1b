package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/criu/pod"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/shim/checkpoint/retention"
)

// TestRemoveCheckpoint: a pod checkpoint goes as a unit, a container
// archive with its signature; a name that is not a checkpoint's, or
// that climbs out, is refused as invalid and removes nothing; one gone
// is no error; an archive being read is busy and stays.
func TestRemoveCheckpoint(t *testing.T) {
	dir := t.TempDir()
	at := time.Date(2026, 11, 28, 4, 0, 0, 0, time.UTC)
	podCk := pod.Name("team-a", "web", at, 0)
	if err := os.MkdirAll(filepath.Join(dir, podCk), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"manifest.json", "app.tar", "sidecar.tar"} {
		if err := os.WriteFile(filepath.Join(dir, podCk, f), []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	archive := "checkpoint-web_team-a-app-2026-11-28T04:00:00Z.tar"
	held := "checkpoint-web_team-a-sidecar-2026-11-28T04:00:00Z.tar"
	for _, f := range []string{archive, archive + ".sig", held, "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := New(Options{Settings: func() Settings { return Settings{Enabled: true, Dir: dir} }})
	ctx := context.Background()

	for _, name := range []string{"notes.txt", "../" + archive, "..", "", podCk + "/app.tar"} {
		if err := s.RemoveCheckpoint(ctx, name); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("RemoveCheckpoint(%q) = %v, want invalid argument", name, err)
		}
	}
	release, err := retention.Hold(filepath.Join(dir, held))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveCheckpoint(ctx, held); !errors.Is(err, errdefs.ErrBusy) {
		t.Errorf("RemoveCheckpoint of a held archive = %v, want busy", err)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{podCk, archive, podCk, "checkpoint-gone_team-a-app-2026-11-28T04:00:00Z.tar"} {
		if err := s.RemoveCheckpoint(ctx, name); err != nil {
			t.Errorf("RemoveCheckpoint(%q) = %v", name, err)
		}
	}
	var left []string
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		left = append(left, e.Name())
	}
	want := []string{retention.TrashDir, held, "notes.txt"}
	if len(left) != len(want) {
		t.Fatalf("left in %s: %v, want %v", dir, left, want)
	}
	for i := range want {
		if left[i] != want[i] {
			t.Errorf("left in %s: %v, want %v", dir, left, want)
		}
	}
	if trash, _ := os.ReadDir(filepath.Join(dir, retention.TrashDir)); len(trash) != 0 {
		t.Errorf("trash not emptied: %v", trash)
	}
	off := New(Options{Settings: func() Settings { return Settings{} }})
	if err := off.RemoveCheckpoint(ctx, archive); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("RemoveCheckpoint with checkpoints off = %v, want not found", err)
	}
}
