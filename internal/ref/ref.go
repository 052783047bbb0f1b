// Package ref names a Kubernetes container the way kubelet's API does:
// namespace, pod and container, as in /checkpoint/{namespace}/{pod}/{container}.
// It is the one container reference of nodeshim: the checkpoint archive's
// (criu/archive), the checkpoint engine's (criu), CRI resolution's
// (runtimes/cri) and the node API's are this type.
package ref

// Container names a Kubernetes container by namespace, pod and container.
type Container struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
}

// String formats r as namespace/pod/container.
func (r Container) String() string {
	return r.Namespace + "/" + r.Pod + "/" + r.Container
}
