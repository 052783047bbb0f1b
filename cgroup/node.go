package cgroup

import "errors"

// FindNodeSources finds, from the procfs mounted at procRoot, the node's
// cgroup2 mount (in procRoot/self/mountinfo) and the kubepods cgroup under
// it, and returns the mount and the NodeSources reading them: ProcRoot,
// CgroupRoot and Kubepods set; the caller adds KubeletRoot and ImageFsRoot.
// A node without a kubepods cgroup (no kubelet yet) is not an error:
// Kubepods is then empty.
func FindNodeSources(procRoot string) (Mount, NodeSources, error) {
	m, err := FindMount(procRoot)
	if err != nil {
		return Mount{}, NodeSources{}, err
	}
	src := NodeSources{ProcRoot: procRoot, CgroupRoot: m.Path}
	tree, err := DiscoverPods(m.Path)
	switch {
	case err == nil:
		src.Kubepods = tree.Kubepods
	case !errors.Is(err, ErrNoKubepods):
		return Mount{}, NodeSources{}, err
	}
	return m, src, nil
}
