package restore

import (
	"slices"
	"testing"

	"github.com/nodeshim/nodeshim/internal/mountinfo"
)

func TestCgroupRelPath(t *testing.T) {
	for _, tc := range []struct {
		name, path, own string
		systemd         bool
		want            string
	}{
		{name: "cgroupfs absolute", path: "/kubepods/burstable/pod1/abc", own: "/x", want: "/kubepods/burstable/pod1/abc"},
		{name: "cgroupfs cleaned", path: "/kubepods//pod1/../pod2/abc", want: "/kubepods/pod2/abc"},
		{name: "cgroupfs relative", path: "kubepods/abc", own: "/user.slice/shim", want: "/user.slice/shim/kubepods/abc"},
		{name: "cgroupfs empty", own: "/shim", want: "/shim/abc"},
		{name: "systemd", path: "kubepods-burstable-pod1.slice:cri-containerd:abc", systemd: true,
			want: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-abc.scope"},
		{name: "systemd empty", systemd: true, want: "/system.slice/runc-abc.scope"},
		{name: "systemd root slice", path: "-.slice:p:abc", systemd: true, want: "/p-abc.scope"},
		{name: "systemd no prefix", path: "machine.slice::abc", systemd: true, want: "/machine.slice/abc.scope"},
		{name: "systemd driver, a path", path: "/kubepods/abc", systemd: true, want: "/kubepods/abc"},
		{name: "colons without systemd", path: "a.slice:p:abc", own: "/", want: "/a.slice:p:abc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cgroupRelPath(tc.path, "abc", tc.systemd, tc.own); got != tc.want {
				t.Errorf("cgroupRelPath(%q) = %q, want %q", tc.path, got, tc.want)
			}
		})
	}
}

func TestCgroupDirs(t *testing.T) {
	hybrid := []mountinfo.Entry{
		{Root: "/", Point: "/sys/fs/cgroup", FSType: "tmpfs"},
		{Root: "/", Point: "/sys/fs/cgroup/unified", FSType: "cgroup2"},
		{Root: "/", Point: "/sys/fs/cgroup/systemd", FSType: "cgroup", SuperOptions: []string{"rw", "xattr", "name=systemd"}},
		{Root: "/", Point: "/sys/fs/cgroup/cpu,cpuacct", FSType: "cgroup", SuperOptions: []string{"rw", "cpu", "cpuacct"}},
		{Root: "/", Point: "/sys/fs/cgroup/memory", FSType: "cgroup", SuperOptions: []string{"rw", "memory"}},
		{Root: "/", Point: "/mnt/memory-again", FSType: "cgroup", SuperOptions: []string{"rw", "memory"}},
	}
	self := []byte("12:memory:/shim\n4:cpuacct,cpu:/shim-cpu\n1:name=systemd:/sd\n0::/v2\n")
	for _, tc := range []struct {
		name   string
		mounts []mountinfo.Entry
		path   string
		want   []string
	}{
		{name: "hybrid absolute", mounts: hybrid, path: "/kubepods/abc", want: []string{
			"/sys/fs/cgroup/unified/kubepods/abc", "/sys/fs/cgroup/systemd/kubepods/abc",
			"/sys/fs/cgroup/cpu,cpuacct/kubepods/abc", "/sys/fs/cgroup/memory/kubepods/abc"}},
		{name: "hybrid relative, below each hierarchy's own cgroup", mounts: hybrid, path: "abc", want: []string{
			"/sys/fs/cgroup/unified/v2/abc", "/sys/fs/cgroup/systemd/sd/abc",
			"/sys/fs/cgroup/cpu,cpuacct/shim-cpu/abc", "/sys/fs/cgroup/memory/shim/abc"}},
		{name: "cgroup namespace root", path: "/kubepods/abc", mounts: []mountinfo.Entry{
			{Root: "/kubepods", Point: "/sys/fs/cgroup", FSType: "cgroup2"}},
			want: []string{"/sys/fs/cgroup/abc"}},
		{name: "outside the mounted sub-tree", path: "/other/abc", mounts: []mountinfo.Entry{
			{Root: "/kubepods", Point: "/sys/fs/cgroup", FSType: "cgroup2"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := cgroupDirs(tc.mounts, self, func(own string) string { return cgroupRelPath(tc.path, "abc", false, own) })
			if !slices.Equal(got, tc.want) {
				t.Errorf("cgroupDirs = %q, want %q", got, tc.want)
			}
		})
	}
}
