package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseMountinfo(t *testing.T) {
	cases := []struct {
		file    string
		want    Mount
		wantErr error
	}{
		{"unified.txt", Mount{Path: "/sys/fs/cgroup", Mode: Unified}, nil},
		{"hybrid.txt", Mount{Path: "/sys/fs/cgroup/unified", Mode: Hybrid,
			V1Controllers: []string{"cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids"}}, nil},
		{"legacy.txt", Mount{}, ErrNoCgroup2},
		// A container sees its own cgroup at /sys/fs/cgroup (root is not "/")
		// and the host's hierarchy under /host: the latter is the node's.
		{"container.txt", Mount{Path: "/host/sys/fs/cgroup v2", Mode: Unified}, nil},
		{"malformed.txt", Mount{}, ErrMountinfoSyntax},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "mountinfo", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseMountinfo(data)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil || got.Path != tc.want.Path || got.Mode != tc.want.Mode || !slices.Equal(got.V1Controllers, tc.want.V1Controllers) {
				t.Fatalf("ParseMountinfo = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestFindMountUnderRoot(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join("testdata", "mountinfo", "unified.txt"))
	if err := os.WriteFile(filepath.Join(root, "self", "mountinfo"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := FindMount(root)
	if err != nil || m.Path != "/sys/fs/cgroup" || m.Mode != Unified {
		t.Fatalf("FindMount = %+v, %v", m, err)
	}
	if _, err := FindMount(filepath.Join(root, "absent")); err == nil {
		t.Fatal("FindMount of a missing proc root succeeded")
	}
}

// addMountinfoSeeds adds the recorded mount tables of testdata/mountinfo
// to f's seed corpus.
func addMountinfoSeeds(f *testing.F) {
	f.Helper()
	for _, name := range []string{"unified.txt", "hybrid.txt", "legacy.txt", "container.txt"} {
		data, err := os.ReadFile(filepath.Join("testdata", "mountinfo", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

func FuzzParseMountinfo(f *testing.F) {
	addMountinfoSeeds(f)
	f.Add([]byte(`1 2 0:3 / /a\134b\040c\07 rw - cgroup2 x rw` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseMountinfo(data)
		if err != nil {
			if !errors.Is(err, ErrNoCgroup2) && !errors.Is(err, ErrMountinfoSyntax) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if m.Mode != Unified && m.Mode != Hybrid {
			t.Fatalf("mode %q", m.Mode)
		}
		if (m.Mode == Hybrid) != (len(m.V1Controllers) > 0) {
			t.Fatalf("mode %s with v1 controllers %v", m.Mode, m.V1Controllers)
		}
	})
}

// controllers returns the controllers available in the cgroup at dir (its
// cgroup.controllers). On a hybrid node the cgroup2 root lists only those not
// bound to v1 hierarchies.
func controllers(dir string) ([]string, error) {
	path := filepath.Join(dir, "cgroup.controllers")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return strings.Fields(string(data)), nil
}
