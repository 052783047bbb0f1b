package criu

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"filippo.io/age"
	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/testenv/testutil"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

// smallTmpfs mounts a tmpfs of size bytes on a new directory.
func smallTmpfs(t *testing.T, size string) string {
	t.Helper()
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("nodeshim-test", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700,size="+size); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// TestCheckpointRefusedWhenTmpfsTooSmall: an encrypted checkpoint, whose
// CRIU images go to a tmpfs, is refused before CRIU runs when that tmpfs
// cannot hold them (here a 16 MiB checkpoint directory in memory, for a
// tree of 64 MiB resident), naming the need and each bound, with
// ErrNoMemory (class ErrUnavailable): nothing was frozen, nothing is
// left in the directory and the target runs on. (A plain checkpoint into
// a tmpfs is the disk's case: shim/checkpoint's SpacePlan counts its
// free space, and TestCheckpointFailuresLeaveTargetRunning fills one.)
func TestCheckpointRefusedWhenTmpfsTooSmall(t *testing.T) {
	bin := requireCriu(t)
	pid, dir := testworkload.Start(t, "count", 64)
	testworkload.WaitCount(t, dir, 3)
	keys := newSealKeys(t)
	for _, tc := range []struct {
		name string
		seal seal.WriteOptions
	}{
		{"encrypted", seal.WriteOptions{Recipients: []age.Recipient{keys.id.Recipient()}, Signer: &keys.signer}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cpdir := smallTmpfs(t, "16m")
			res, err := Checkpoint(t.Context(), pidTarget(t, pid), Options{Binary: bin, ArchiveDir: cpdir, Seal: tc.seal})
			if !errors.Is(err, ErrNoMemory) || !errors.Is(err, errdefs.ErrUnavailable) {
				t.Fatalf("Checkpoint into a 16 MiB tmpfs: %+v, %v; want ErrNoMemory", res, err)
			}
			for _, want := range []string{"is a tmpfs", "the tmpfs has", "MemAvailable", "and the archive beside them"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal does not say %q: %v", want, err)
				}
			}
			t.Log(err)
			if res.Frozen != 0 || res.Path != "" {
				t.Errorf("refused, yet frozen %s, archive %q", res.Frozen, res.Path)
			}
			if left, _ := os.ReadDir(cpdir); len(left) != 0 {
				t.Errorf("%s holds %v after the refusal", cpdir, left)
			}
			testworkload.AssertRunning(t, pid, dir)
		})
	}
}

// TestReadMemoryRoom: the room of a tmpfs is the least of its free
// space, MemAvailable and its writer's memory cgroup's limit less the
// usage that is not inactive file pages (cgroup v1's hierarchical limit;
// v2's least memory.max up the tree); a cgroup without a limit bounds
// nothing.
func TestReadMemoryRoom(t *testing.T) {
	tmpfs := smallTmpfs(t, "64m")
	const mib = 1 << 20
	tests := []struct {
		name    string
		cgroup  string            // /proc/self/cgroup
		files   map[string]string // under the cgroup root
		avail   int64             // MemAvailable, MiB
		want    int64             // MiB
		cgRoom  int64             // MiB, -1 unknown
		cgInMsg bool
	}{
		{"v1 limit", "4:memory:/pod\n0::/\n", map[string]string{
			"memory/pod/memory.stat":           "cache 0\nhierarchical_memory_limit 41943040\ntotal_inactive_file 10485760\n",
			"memory/pod/memory.usage_in_bytes": "20971520\n",
		}, 1024, 30, 30, true},
		{"v1 unlimited", "4:memory:/pod\n", map[string]string{
			"memory/pod/memory.stat":           "hierarchical_memory_limit 9223372036854771712\n",
			"memory/pod/memory.usage_in_bytes": "20971520\n",
		}, 1024, 64, -1, false},
		{"v2 parent's limit", "0::/kubepods/pod/c\n", map[string]string{
			"kubepods/pod/memory.max":       "33554432\n",
			"kubepods/pod/c/memory.max":     "max\n",
			"kubepods/pod/c/memory.current": "8388608\n",
			"kubepods/pod/c/memory.stat":    "anon 8388608\ninactive_file 0\n",
		}, 1024, 24, 24, true},
		{"node memory the least", "0::/\n", nil, 10, 10, -1, false},
		{"usage over the limit", "0::/c\n", map[string]string{
			"c/memory.max": "1048576\n", "c/memory.current": "2097152\n",
		}, 1024, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc, cg := t.TempDir(), t.TempDir()
			write := func(p, data string) {
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			write(filepath.Join(proc, "meminfo"), "MemTotal: 4000000 kB\nMemAvailable:   "+itoa(tt.avail*1024)+" kB\n")
			write(filepath.Join(proc, "self", "cgroup"), tt.cgroup)
			for name, data := range tt.files {
				write(filepath.Join(cg, name), data)
			}
			m, err := ReadMemoryRoom(proc, cg, tmpfs)
			if err != nil {
				t.Fatal(err)
			}
			if m.Bytes != tt.want*mib || (tt.cgRoom >= 0) != (m.Cgroup >= 0) || (tt.cgRoom >= 0 && m.Cgroup != tt.cgRoom*mib) {
				t.Errorf("ReadMemoryRoom = %+v; want %d MiB, cgroup %d MiB", m, tt.want, tt.cgRoom)
			}
			if got := strings.Contains(m.String(), "memory cgroup"); got != tt.cgInMsg {
				t.Errorf("%q names the cgroup: %v, want %v", m, got, tt.cgInMsg)
			}
		})
	}
	if _, err := ReadMemoryRoom(t.TempDir(), "", tmpfs); err == nil {
		t.Error("no meminfo, no error")
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
