package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// Driver is the naming scheme kubelet uses for pod cgroups (its
// --cgroup-driver).
type Driver string

// The two cgroup drivers.
const (
	// Cgroupfs names cgroups kubepods/burstable/pod<uid>/<container id>.
	Cgroupfs Driver = "cgroupfs"
	// Systemd names them kubepods.slice/kubepods-burstable.slice/
	// kubepods-burstable-pod<uid with _ for ->.slice/cri-containerd-<id>.scope.
	Systemd Driver = "systemd"
)

// QOSClass is a pod's quality-of-service class as its cgroup placement shows it.
type QOSClass string

// The QoS classes (k8s.io/api/core/v1 PodQOSClass values).
const (
	Guaranteed QOSClass = "Guaranteed"
	Burstable  QOSClass = "Burstable"
	BestEffort QOSClass = "BestEffort"
)

// Container is a container's cgroup.
type Container struct {
	// ID is the runtime's container id (the scope name without the runtime
	// prefix and .scope suffix under systemd).
	ID string
	// Path is the cgroup directory.
	Path string
}

// Pod is a pod's cgroup.
type Pod struct {
	UID        string
	QOS        QOSClass
	Path       string
	Containers []Container
}

// PodTree is the node's kubepods hierarchy.
type PodTree struct {
	Driver Driver
	// Kubepods is the kubepods cgroup directory; Burstable and BestEffort
	// are the QoS cgroups under it (empty when absent).
	Kubepods, Burstable, BestEffort string
	Pods                            []Pod
	// Vanished counts pods and containers removed during the scan; they are
	// left out of Pods.
	Vanished int
	// PassErr, set by ReadPodUsage, says why its Reader's PassSource did
	// not read the pods and their files were read instead.
	PassErr error
}

// ErrNoKubepods is returned when the cgroup2 tree has no kubepods cgroup
// (class errdefs.ErrNotFound).
var ErrNoKubepods = errdefs.New(errdefs.ErrNotFound, "no kubepods cgroup")

// DiscoverPods finds the kubepods cgroup under the cgroup2 mount root, with
// either driver's naming, and the pod and container cgroups under it.
func DiscoverPods(root string) (PodTree, error) {
	var t PodTree
	switch {
	case isDir(filepath.Join(root, "kubepods.slice")):
		t.Driver, t.Kubepods = Systemd, filepath.Join(root, "kubepods.slice")
		t.Burstable = dirOrEmpty(filepath.Join(t.Kubepods, "kubepods-burstable.slice"))
		t.BestEffort = dirOrEmpty(filepath.Join(t.Kubepods, "kubepods-besteffort.slice"))
	case isDir(filepath.Join(root, "kubepods")):
		t.Driver, t.Kubepods = Cgroupfs, filepath.Join(root, "kubepods")
		t.Burstable = dirOrEmpty(filepath.Join(t.Kubepods, "burstable"))
		t.BestEffort = dirOrEmpty(filepath.Join(t.Kubepods, "besteffort"))
	default:
		return PodTree{}, fmt.Errorf("%s: %w", root, ErrNoKubepods)
	}
	for _, q := range []struct {
		dir string
		qos QOSClass
	}{{t.Kubepods, Guaranteed}, {t.Burstable, Burstable}, {t.BestEffort, BestEffort}} {
		if q.dir == "" {
			continue
		}
		entries, err := os.ReadDir(q.dir)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				t.Vanished++
				continue
			}
			return PodTree{}, fmt.Errorf("read %s: %w", q.dir, err)
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			uid, ok := podUID(t.Driver, q.qos, e.Name())
			if !ok {
				continue
			}
			p := Pod{UID: uid, QOS: q.qos, Path: filepath.Join(q.dir, e.Name())}
			cs, err := os.ReadDir(p.Path)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					t.Vanished++
					continue
				}
				return PodTree{}, fmt.Errorf("read %s: %w", p.Path, err)
			}
			for _, c := range cs {
				if !c.IsDir() {
					continue
				}
				if id, ok := containerID(t.Driver, c.Name()); ok {
					p.Containers = append(p.Containers, Container{ID: id, Path: filepath.Join(p.Path, c.Name())})
				}
			}
			t.Pods = append(t.Pods, p)
		}
	}
	sort.Slice(t.Pods, func(i, j int) bool { return t.Pods[i].UID < t.Pods[j].UID })
	return t, nil
}

// podUID extracts the pod UID from a pod cgroup's directory name.
// cgroupfs: "pod<uid>"; systemd: "kubepods[-<qos>]-pod<uid, - as _>.slice"
// (kubelet's cgroup_manager_linux.go, ToSystemd escaping).
func podUID(d Driver, q QOSClass, name string) (string, bool) {
	if d == Cgroupfs {
		uid, ok := strings.CutPrefix(name, "pod")
		return uid, ok && uid != ""
	}
	prefix := "kubepods-pod"
	switch q {
	case Burstable:
		prefix = "kubepods-burstable-pod"
	case BestEffort:
		prefix = "kubepods-besteffort-pod"
	}
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return "", false
	}
	uid, ok := strings.CutSuffix(rest, ".slice")
	if !ok || uid == "" {
		return "", false
	}
	return strings.ReplaceAll(uid, "_", "-"), true
}

// containerID extracts a container id from a container cgroup's name:
// the bare id under cgroupfs; "<runtime>-<id>.scope" (cri-containerd, crio,
// docker) under systemd. Pause and sandbox containers are containers too.
func containerID(d Driver, name string) (string, bool) {
	if d == Cgroupfs {
		return name, name != ""
	}
	scope, ok := strings.CutSuffix(name, ".scope")
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(scope, '-')
	if i < 0 || i == len(scope)-1 {
		return "", false
	}
	return scope[i+1:], true
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func dirOrEmpty(p string) string {
	if isDir(p) {
		return p
	}
	return ""
}
