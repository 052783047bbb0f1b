package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

func TestParseLayout(t *testing.T) {
	file := func(name string) string {
		data, err := os.ReadFile(filepath.Join("testdata", "mountinfo", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	const (
		cg2     = "30 22 0:26 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
		systemd = "31 30 0:27 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd\n"
		memory  = "32 30 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
	)
	v1 := func(point string, names ...string) []V1Controller {
		var cs []V1Controller
		for _, n := range names {
			cs = append(cs, V1Controller{Name: n, Point: point})
		}
		return cs
	}
	hybridV1 := slices.Concat(v1("/sys/fs/cgroup/cpu", "cpu"), v1("/sys/fs/cgroup/cpuacct", "cpuacct"), v1("/sys/fs/cgroup/cpuset", "cpuset"),
		v1("/sys/fs/cgroup/memory", "memory"), v1("/sys/fs/cgroup/devices", "devices"), v1("/sys/fs/cgroup/freezer", "freezer"),
		v1("/sys/fs/cgroup/blkio", "blkio"), v1("/sys/fs/cgroup/pids", "pids"))
	tests := []struct {
		name  string
		table string
		want  Layout
		mode  Mode
	}{
		{"unified", file("unified.txt"), Layout{V2: "/sys/fs/cgroup", V2Root: "/"}, Unified},
		{"hybrid", file("hybrid.txt"), Layout{V2: "/sys/fs/cgroup/unified", V2Root: "/", V1: hybridV1}, Hybrid},
		{"legacy", file("legacy.txt"), Layout{V1: slices.Concat(v1("/sys/fs/cgroup/cpu,cpuacct", "cpu", "cpuacct"), v1("/sys/fs/cgroup/memory", "memory"))}, Legacy},
		{"no cgroups", "26 1 254:0 / / rw - ext4 /dev/vda rw\n", Layout{}, NoCgroups},
		{"memory_localevents", "30 22 0:26 / /sys/fs/cgroup rw shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_localevents,memory_recursiveprot\n",
			Layout{V2: "/sys/fs/cgroup", V2Root: "/", V2LocalEvents: true}, Unified},
		{"a named hierarchy binds no controller", cg2 + systemd, Layout{V2: "/sys/fs/cgroup", V2Root: "/"}, Unified},
		{"mount options are not controllers", cg2 + "33 30 0:29 / /x rw - cgroup cgroup rw,all,noprefix,clone_children,release_agent=/bin/x,none\n",
			Layout{V2: "/sys/fs/cgroup", V2Root: "/"}, Unified},
		{"one controller on two controllers' hierarchy", "33 30 0:30 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n",
			Layout{V1: v1("/sys/fs/cgroup/cpu,cpuacct", "cpu", "cpuacct")}, Legacy},
		{"a v1 hierarchy mounted twice is listed at its first mount", memory + "40 1 0:28 / /host/memory rw - cgroup cgroup rw,memory\n",
			Layout{V1: v1("/sys/fs/cgroup/memory", "memory")}, Legacy},
		{"the mount at /sys/fs/cgroup wins", "1 0 0:26 / /run/other rw - cgroup2 cgroup2 rw\n" + cg2,
			Layout{V2: "/sys/fs/cgroup", V2Root: "/"}, Unified},
		{"else the first", "1 0 0:26 / /run/a rw - cgroup2 cgroup2 rw\n2 0 0:26 / /run/b rw - cgroup2 cgroup2 rw\n",
			Layout{V2: "/run/a", V2Root: "/"}, Unified},
		{"the whole hierarchy wins over a sub-tree at /sys/fs/cgroup", file("container.txt"),
			Layout{V2: "/host/sys/fs/cgroup v2", V2Root: "/"}, Unified},
		{"a sub-tree only", "615 610 0:24 /kubepods.slice /sys/fs/cgroup ro - cgroup2 cgroup rw\n",
			Layout{V2: "/sys/fs/cgroup", V2Root: "/kubepods.slice"}, Unified},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseLayout([]byte(tc.table))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) || got.Mode() != tc.mode {
				t.Errorf("ParseLayout = %+v (mode %s), want %+v (mode %s)", got, got.Mode(), tc.want, tc.mode)
			}
		})
	}
	if _, err := ParseLayout([]byte(file("malformed.txt"))); !errors.Is(err, ErrMountinfoSyntax) {
		t.Errorf("malformed table: err = %v, want %v", err, ErrMountinfoSyntax)
	}
}

func FuzzParseLayout(f *testing.F) {
	addMountinfoSeeds(f)
	f.Add([]byte("1 0 0:1 / /a rw - cgroup x rw,memory\n2 0 0:1 / /b rw - cgroup x rw,memory,cpu\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := ParseLayout(data)
		if err != nil {
			if !errors.Is(err, ErrMountinfoSyntax) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		names := l.V1Names()
		slices.Sort(names)
		if len(slices.Compact(names)) != len(l.V1) {
			t.Fatalf("a v1 controller listed twice: %+v", l.V1)
		}
		withV2 := l.Mode() == Unified || l.Mode() == Hybrid
		if (l.V2 != "") != withV2 || (l.V2 == "" && l.V2Root != "") {
			t.Fatalf("V2 %q root %q in mode %s", l.V2, l.V2Root, l.Mode())
		}
	})
}
