package workentry

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// fakeCgroup makes a directory with a cgroup v1 freezer.state of state.
func fakeCgroup(t *testing.T, root, name, state string) string {
	t.Helper()
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "freezer.state"), []byte(state), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func freezerState(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "freezer.state"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func records(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestThawLeftFrozen: a record its maker holds is left alone; one whose
// maker is gone (its lock went with it) has its cgroups thawed and is
// removed, a cgroup gone meanwhile passed over; a record cut short while
// written is removed; a thawed record is removed by its maker.
func TestThawLeftFrozen(t *testing.T) {
	root, locks := t.TempDir(), filepath.Join(t.TempDir(), "locks")
	held := fakeCgroup(t, root, "held", "FROZEN")
	left := fakeCgroup(t, root, "left", "FROZEN")
	gone := filepath.Join(root, "gone")

	working, err := RecordFrozen(locks, []string{held})
	if err != nil {
		t.Fatal(err)
	}
	killed, err := RecordFrozen(locks, []string{left, gone})
	if err != nil {
		t.Fatal(err)
	}
	killed.f.Close() // as the maker's death does: the lock goes, the file stays
	cut := filepath.Join(locks, frozenPrefix+"1-cut"+frozenSuffix)
	if err := os.WriteFile(cut, []byte(`{"cgroups": ["/sys/fs/cg`), 0o600); err != nil {
		t.Fatal(err)
	}

	thawed, err := ThawLeftFrozen(locks)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(thawed, []string{left}) {
		t.Errorf("thawed %v, want [%s]", thawed, left)
	}
	if got := freezerState(t, left); got != "THAWED" {
		t.Errorf("left: %q, want THAWED", got)
	}
	if got := freezerState(t, held); got != "FROZEN" {
		t.Errorf("held: %q, its maker's to thaw", got)
	}
	if got := records(t, locks); len(got) != 1 || filepath.Join(locks, got[0]) != working.path {
		t.Errorf("records left %v, want only the held one", got)
	}

	if err := working.Thawed(); err != nil {
		t.Fatal(err)
	}
	if got := records(t, locks); len(got) != 0 {
		t.Errorf("records left %v after Thawed", got)
	}
	var none *FrozenRecord
	if err := none.Thawed(); err != nil {
		t.Errorf("nil record: %v", err)
	}
	if r, err := RecordFrozen("", []string{held}); r != nil || err != nil {
		t.Errorf("RecordFrozen without a directory: %v, %v; want nothing recorded", r, err)
	}
	if _, err := RecordFrozen(locks, []string{"relative/cg"}); err == nil {
		t.Error("RecordFrozen took a relative cgroup path")
	}
}
