package kernel

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/internal/mountinfo"
	"github.com/nodeshim/nodeshim/kernel/capability"
)

func FuzzCgroupLayoutOf(f *testing.F) {
	for _, p := range []string{"../testdata/hosts/debian-6.1/proc/self/mountinfo", "../testdata/hosts/rhel-8.10/proc/self/mountinfo"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("1 2 3 4 \\0 5 - a b\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ms, err := mountinfo.Parse(b)
		if err != nil {
			return
		}
		l := CgroupLayoutOf(ms)
		if (l.V2 != "") != (l.Mode == capability.CgroupUnified || l.Mode == capability.CgroupHybrid) {
			t.Fatalf("layout %+v", l)
		}
	})
}

// TestCgroupLayoutOf checks the report's terms; which mount is the node's
// is package cgroup's (cgroup.TestParseLayout).
func TestCgroupLayoutOf(t *testing.T) {
	cg := func(point string, opts ...string) mountinfo.Entry {
		return mountinfo.Entry{Root: "/", Point: point, FSType: "cgroup", Source: "cgroup", SuperOptions: append([]string{"rw"}, opts...)}
	}
	cg2 := func(point string) mountinfo.Entry {
		return mountinfo.Entry{Root: "/", Point: point, FSType: "cgroup2", Source: "cgroup2"}
	}
	tests := []struct {
		name   string
		mounts []mountinfo.Entry
		mode   capability.CgroupMode
		v2     string
		v1     map[string]string
	}{
		{"unified", []mountinfo.Entry{cg2("/sys/fs/cgroup")}, capability.CgroupUnified, "/sys/fs/cgroup", map[string]string{}},
		{"hybrid", []mountinfo.Entry{cg("/sys/fs/cgroup/systemd", "name=systemd"), cg("/sys/fs/cgroup/cpu,cpuacct", "cpu", "cpuacct"), cg2("/sys/fs/cgroup/unified")},
			capability.CgroupHybrid, "/sys/fs/cgroup/unified", map[string]string{"cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct"}},
		{"legacy", []mountinfo.Entry{cg("/sys/fs/cgroup/memory", "memory")}, capability.CgroupLegacy, "", map[string]string{"memory": "/sys/fs/cgroup/memory"}},
		{"none", []mountinfo.Entry{{Root: "/", Point: "/", FSType: "ext4"}}, capability.CgroupNone, "", map[string]string{}},
		{"the mount at /sys/fs/cgroup wins", []mountinfo.Entry{cg2("/run/other"), cg2("/sys/fs/cgroup")}, capability.CgroupUnified, "/sys/fs/cgroup", map[string]string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := CgroupLayoutOf(tc.mounts)
			if l.Mode != tc.mode || l.V2 != tc.v2 || !reflect.DeepEqual(l.V1, tc.v1) {
				t.Errorf("got %+v, want %s %q %v", l, tc.mode, tc.v2, tc.v1)
			}
		})
	}
}

func TestReadHostMountsPrefersPid1(t *testing.T) {
	proc := t.TempDir()
	writeFile(t, filepath.Join(proc, "self/mountinfo"), "1 0 0:1 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
	m, err := readHostMounts(proc)
	if err != nil || len(m) != 1 || m[0].FSType != "cgroup2" {
		t.Fatalf("fallback to self: %+v, %v", m, err)
	}
	writeFile(t, filepath.Join(proc, "1/mountinfo"), "1 0 0:1 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n")
	m, err = readHostMounts(proc)
	if err != nil || len(m) != 1 || m[0].FSType != "cgroup" {
		t.Fatalf("pid 1: %+v, %v", m, err)
	}
	if _, err := readHostMounts(t.TempDir()); err == nil || !strings.Contains(err.Error(), "self/mountinfo") {
		t.Errorf("neither: %v", err)
	}
}
