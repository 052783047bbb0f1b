package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// legacyStore is a state directory written by nodeshim before config
// snapshots had their own name: state.json, and the snapshots in
// checkpoints/ (with the leftover of an interrupted write).
const legacyStore = "testdata/store-v0"

// The payloads of legacyStore: A soaked and became last-known-good at
// t0+10m, then B was assigned.
const (
	legacyA = "e8fd36d2748c5134f7099652d3b546c6aabbc1d98543272d34d8755cd602fc23"
	legacyB = "0f9a3649d4a8bdba4a79461eaf5e0b16f127ffe102d83270eae32a2a68b42045"
)

// TestOpenLegacyStore opens a store in the legacy layout, as a node that
// upgrades nodeshim does, including a migration that was interrupted and
// a legacy directory recreated by a downgrade, and checks that the same
// configuration is in force and only the new layout is left.
func TestOpenLegacyStore(t *testing.T) {
	tests := []struct {
		name string
		// prepare changes the copy of legacyStore before Open.
		prepare func(t *testing.T, state string)
	}{
		{"as written", func(*testing.T, string) {}},
		{"migration interrupted after one move", func(t *testing.T, state string) {
			moveSnapshot(t, state, legacyA)
		}},
		{"snapshot in both layouts", func(t *testing.T, state string) {
			moveSnapshot(t, state, legacyB)
			copyFile(t, filepath.Join(legacyStore, legacySnapshotsDir, legacyB+".json"), filepath.Join(state, legacySnapshotsDir, legacyB+".json"))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			state, source := filepath.Join(dir, "config"), filepath.Join(dir, "source")
			if err := os.CopyFS(state, os.DirFS(legacyStore)); err != nil {
				t.Fatal(err)
			}
			tc.prepare(t, state)
			clock := clocktesting.NewFakeClock(t0.Add(15 * time.Minute))
			c, err := Open(Options{StateDir: state, SourceDir: source, Clock: clock, Logger: quietLogger()})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			st := c.Status()
			if refUID(st.Assigned) != short(legacyB) || refUID(st.Active) != short(legacyB) || refUID(st.LastKnownGood) != short(legacyA) || st.Error != "" {
				t.Errorf("status = assigned %s active %s last-known-good %s error %q, want %s %s %s and no error",
					refUID(st.Assigned), refUID(st.Active), refUID(st.LastKnownGood), st.Error, short(legacyB), short(legacyB), short(legacyA))
			}
			if st.Assigned != nil && !st.Assigned.AssignedAt.Time.Equal(t0.Add(DefaultSoakPeriod)) {
				t.Errorf("assignedAt = %v, want %v", st.Assigned.AssignedAt, t0.Add(DefaultSoakPeriod))
			}
			if got := c.Active(); !slices.Equal(got.Plugins.Expected, []string{"driver-2"}) || got.Network.CNIConfDir != "/opt/cni" {
				t.Errorf("Active = plugins.expected %v, network.cniConfDir %q; want [driver-2], /opt/cni", got.Plugins.Expected, got.Network.CNIConfDir)
			}
			if _, err := os.Stat(filepath.Join(state, legacySnapshotsDir)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("legacy directory still there: %v", err)
			}
			var names []string
			entries, err := os.ReadDir(filepath.Join(state, snapshotsDir))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				names = append(names, e.Name())
			}
			if want := []string{legacyB + ".json", legacyA + ".json"}; !slices.Equal(names, want) {
				t.Errorf("snapshots = %v, want %v", names, want)
			}

			// The lifecycle goes on from the migrated store: B, still the
			// source, becomes last-known-good once it has soaked.
			writeSource(t, source, map[string]string{BaseFile: goodConfig(2), "10-a.conf": "apiVersion: nodeshim.io/v1alpha1\nkind: ShimConfiguration\nnetwork: {cniConfDir: /opt/cni}\n"})
			clock.Step(10 * time.Minute)
			if err := c.Sync(); err != nil {
				t.Fatal(err)
			}
			if st := c.Status(); refUID(st.LastKnownGood) != short(legacyB) {
				t.Errorf("last-known-good after the soak = %s, want %s", refUID(st.LastKnownGood), short(legacyB))
			}
		})
	}
}

// moveSnapshot moves one snapshot of the copied legacy store to the new
// layout, as a migration interrupted after that move leaves it.
func moveSnapshot(t *testing.T, state, uid string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(state, snapshotsDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(state, legacySnapshotsDir, uid+".json"), filepath.Join(state, snapshotsDir, uid+".json")); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
