package criu

import (
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nodeshim/nodeshim/internal/mountinfo"
	"github.com/nodeshim/nodeshim/testenv/golden"
)

// podmanSpec is the shape of a podman 4 container's config.json under
// runc: an absolute root, its own bind mounts, the cgroup mount of a host
// without cgroup namespaces, masked and read-only paths, its own network
// and PID namespaces.
func podmanSpec() *specs.Spec {
	return &specs.Spec{
		Root: &specs.Root{Path: "/var/lib/containers/storage/overlay/abc/merged"},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs"},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs"},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"rprivate", "nosuid", "ro"}},
			{Destination: "/dev/shm", Type: "bind", Source: "/run/containers/abc/shm", Options: []string{"bind", "private"}},
			{Destination: "/etc/hosts", Type: "bind", Source: "/run/containers/abc/hosts", Options: []string{"bind", "rprivate"}},
			{Destination: "/run/.containerenv", Source: "/run/containers/abc/.containerenv", Options: []string{"rbind"}},
			{Destination: "etc/hostname/", Type: "bind", Source: "/run/containers/abc/hostname"},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
			},
			MaskedPaths:   []string{"/proc/acpi", "/proc/kcore", "/proc/keys", "/sys/firmware"},
			ReadonlyPaths: []string{"/proc/asound", "/proc/sys"},
			Devices:       []specs.LinuxDevice{{Path: "/dev/fuse", Type: "c", Major: 10, Minor: 229}},
		},
	}
}

// criSpec is the shape of a containerd CRI container's spec: a root
// relative to the bundle, the pod's network, IPC and UTS namespaces
// joined by path, its own cgroup namespace, a service account volume.
func criSpec(sharedPID bool) *specs.Spec {
	pid := specs.LinuxNamespace{Type: specs.PIDNamespace}
	if sharedPID {
		pid.Path = "/proc/4242/ns/pid"
	}
	return &specs.Spec{
		Root: &specs.Root{Path: "rootfs"},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup"},
			{Destination: "/etc/hosts", Type: "bind", Source: "/var/lib/kubelet/pods/u/etc-hosts", Options: []string{"rbind", "rprivate", "rw"}},
			{Destination: "/var/run/secrets/kubernetes.io/serviceaccount", Type: "bind", Source: "/var/lib/kubelet/pods/u/volumes/sa", Options: []string{"rbind", "ro"}},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				pid,
				{Type: specs.IPCNamespace, Path: "/proc/4242/ns/ipc"},
				{Type: specs.UTSNamespace, Path: "/proc/4242/ns/uts"},
				{Type: specs.MountNamespace},
				{Type: specs.NetworkNamespace, Path: "/var/run/netns/cni-1234"},
				{Type: specs.CgroupNamespace},
			},
			MaskedPaths: []string{"/proc/kcore"},
		},
	}
}

// v1CgroupMounts is what runc leaves under /sys/fs/cgroup on a cgroup v1
// host without cgroup namespaces: a tmpfs and one bind per hierarchy.
var v1CgroupMounts = []mountinfo.Entry{
	{Point: "/", FSType: "overlay"},
	{Point: "/sys/fs/cgroup", FSType: "tmpfs"},
	{Point: "/sys/fs/cgroup/cpu", FSType: "cgroup", Root: "/libpod_parent/abc"},
	{Point: "/sys/fs/cgroup/freezer", FSType: "cgroup", Root: "/libpod_parent/abc"},
	{Point: "/sys/fs/cgroup/systemd", FSType: "cgroup", Root: "/"},
	{Point: "/sys/fs/cgroupfoo", FSType: "cgroup"},
}

func TestContainerOptionsFromSpec(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spec   *specs.Spec
		bundle string
		state  ContainerState
	}{
		{"podman-cgroup-v1", podmanSpec(), "", ContainerState{
			Mounts:        v1CgroupMounts,
			MaskedFiles:   []string{"/proc/kcore", "/proc/keys"},
			FreezerCgroup: "/sys/fs/cgroup/freezer/libpod_parent/abc",
			Stdio:         []string{"/dev/null", "pipe:[1]", "pipe:[2]"},
		}},
		{"podman-cgroup-v2", podmanSpec(), "", ContainerState{
			Mounts: []mountinfo.Entry{{Point: "/", FSType: "overlay"}, {Point: "/sys/fs/cgroup", FSType: "cgroup2"}},
		}},
		{"cri-pod", criSpec(false), "/run/containerd/task/k8s.io/c1", ContainerState{
			Mounts:     []mountinfo.Entry{{Point: "/sys/fs/cgroup", FSType: "cgroup"}},
			Namespaces: map[specs.LinuxNamespaceType]uint64{specs.NetworkNamespace: 4026532300, specs.PIDNamespace: 4026532400},
		}},
		{"cri-pod-shared-pid", criSpec(true), "/run/containerd/task/k8s.io/c1", ContainerState{
			Namespaces: map[specs.LinuxNamespaceType]uint64{specs.NetworkNamespace: 4026532300, specs.PIDNamespace: 4026532200},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ContainerOptionsFromSpec(tc.spec, tc.bundle, tc.state)
			if err != nil {
				t.Fatal(err)
			}
			golden.CheckJSON(t, "spec/"+tc.name+".json", got)
		})
	}
}

func TestContainerOptionsFromSpecErrors(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		spec       *specs.Spec
		bundle     string
	}{
		{"no spec", "no root path", nil, ""},
		{"no root", "no root path", &specs.Spec{}, ""},
		{"relative root without bundle", "bundle is unknown", criSpec(false), ""},
		{"joined namespace of unknown inode", "inode of it is unknown", criSpec(false), "/b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ContainerOptionsFromSpec(tc.spec, tc.bundle, ContainerState{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestLayerOf(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mounts []mountinfo.Entry
		want   Layer
	}{
		{"overlay root", []mountinfo.Entry{
			{Point: "/", FSType: "ext4"},
			{Point: "/", FSType: "overlay", SuperOptions: []string{"rw", "lowerdir=/l/2:/l/1", "upperdir=/u/diff", "workdir=/u/work"}},
			{Point: "/proc", FSType: "proc"},
		}, Layer{Upper: "/u/diff", Lower: []string{"/l/2", "/l/1"}}},
		{"read-only overlay", []mountinfo.Entry{{Point: "/", FSType: "overlay", SuperOptions: []string{"lowerdir=/l/1"}}}, Layer{}},
		{"no overlay", []mountinfo.Entry{{Point: "/", FSType: "xfs"}}, Layer{}},
		{"no root", nil, Layer{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := LayerOf(tc.mounts)
			if got.Upper != tc.want.Upper || strings.Join(got.Lower, ":") != strings.Join(tc.want.Lower, ":") {
				t.Errorf("LayerOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}
