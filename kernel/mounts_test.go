package kernel

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/kernel/capability"
)

func TestParseMountInfo(t *testing.T) {
	in := "30 22 0:26 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n" +
		"45 28 0:38 / /var/lib/kubelet/pods/3f1c\\040a/volumes rw,relatime - tmpfs tmpfs rw,size=1048576k\n" +
		"33 30 0:30 / /sys/fs/cgroup/cpu,cpuacct rw master:1 shared:7 - cgroup cgroup rw,cpu,cpuacct\n" +
		"50 1 0:40 / /mnt rw - fuse.sshfs user@host:/a\\134b\n"
	got, err := ParseMountInfo(in)
	if err != nil {
		t.Fatal(err)
	}
	want := []Mount{
		{Point: "/sys/fs/cgroup", FSType: "cgroup2", Source: "cgroup2", SuperOptions: []string{"rw", "nsdelegate"}},
		{Point: "/var/lib/kubelet/pods/3f1c a/volumes", FSType: "tmpfs", Source: "tmpfs", SuperOptions: []string{"rw", "size=1048576k"}},
		{Point: "/sys/fs/cgroup/cpu,cpuacct", FSType: "cgroup", Source: "cgroup", SuperOptions: []string{"rw", "cpu", "cpuacct"}},
		{Point: "/mnt", FSType: "fuse.sshfs", Source: `user@host:/a\b`},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	for _, bad := range []string{"1 2 3", "30 22 0:26 / /x rw shared:9 cgroup2 cgroup2 rw", "30 22 0:26 / /x rw -"} {
		if _, err := ParseMountInfo(bad); err == nil {
			t.Errorf("ParseMountInfo(%q): no error", bad)
		}
	}
}

func FuzzParseMountInfo(f *testing.F) {
	for _, p := range []string{"../testdata/hosts/debian-6.1/proc/self/mountinfo", "../testdata/hosts/rhel-8.10/proc/self/mountinfo"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add("1 2 3 4 \\0 5 - a b\n")
	f.Fuzz(func(t *testing.T, s string) {
		ms, err := ParseMountInfo(s)
		if err != nil {
			return
		}
		for _, m := range ms {
			if m.FSType == "" {
				t.Fatalf("mount without type: %+v", m)
			}
		}
		CgroupLayoutOf(ms) // must not panic on any table
	})
}

func TestCgroupLayoutOf(t *testing.T) {
	cg := func(point string, opts ...string) Mount {
		return Mount{Point: point, FSType: "cgroup", Source: "cgroup", SuperOptions: append([]string{"rw"}, opts...)}
	}
	cg2 := func(point string) Mount { return Mount{Point: point, FSType: "cgroup2", Source: "cgroup2"} }
	tests := []struct {
		name   string
		mounts []Mount
		mode   capability.CgroupMode
		v2     string
		v1     map[string]string
	}{
		{"unified", []Mount{cg2("/sys/fs/cgroup")}, capability.CgroupUnified, "/sys/fs/cgroup", map[string]string{}},
		{"hybrid", []Mount{cg("/sys/fs/cgroup/systemd", "name=systemd"), cg("/sys/fs/cgroup/cpu,cpuacct", "cpu", "cpuacct"), cg2("/sys/fs/cgroup/unified")},
			capability.CgroupHybrid, "/sys/fs/cgroup/unified", map[string]string{"cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct"}},
		{"legacy", []Mount{cg("/sys/fs/cgroup/memory", "memory")}, capability.CgroupLegacy, "", map[string]string{"memory": "/sys/fs/cgroup/memory"}},
		{"none", []Mount{{Point: "/", FSType: "ext4"}}, capability.CgroupNone, "", map[string]string{}},
		{"the mount at /sys/fs/cgroup wins", []Mount{cg2("/run/other"), cg2("/sys/fs/cgroup")}, capability.CgroupUnified, "/sys/fs/cgroup", map[string]string{}},
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
