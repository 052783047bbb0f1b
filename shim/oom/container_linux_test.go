package oom

import (
	"context"
	"path/filepath"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/shim/source/sourcetest"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
)

// runLimited creates and starts a container in pod with a memory limit,
// through the runtime's CRI as kubelet sets resources.limits.memory.
func runLimited(t *testing.T, c *runtimetest.Containerd, pod *runtimetest.Pod, name string, limit int64, cmd ...string) *runtimetest.Container {
	t.Helper()
	labels := map[string]string{runtimetest.LabelContainerName: name}
	for _, k := range []string{runtimetest.LabelPodName, runtimetest.LabelPodNamespace, runtimetest.LabelPodUID} {
		labels[k] = pod.Config.Labels[k]
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: runtimetest.BusyboxImage},
		Command:  cmd,
		Labels:   labels,
		LogPath:  name + ".log",
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: limit},
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: pod.Config.Linux.SecurityContext.NamespaceOptions,
			},
		},
	}
	ctx := context.Background()
	resp, err := c.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod.ID, Config: cfg, SandboxConfig: pod.Config})
	if err != nil {
		t.Fatalf("create %s: %v\n%s", name, err, c.Log())
	}
	ctr := &runtimetest.Container{ID: resp.ContainerId, Name: name, Pod: pod, LogPath: filepath.Join(pod.Config.LogDirectory, name+".log")}
	ctr.Start(t)
	return ctr
}

// TestOOMKillInContainer OOM-kills a process in a real CRI container with a
// 32 MiB memory limit, under runc and crun, and finds the kill in the model
// with the container's namespace, pod and container names.
func TestOOMKillInContainer(t *testing.T) {
	c := rtEnv.Containerd(t)
	m := status.New(nil)
	// Through the CRI socket, as serve connects to the node's runtime.
	sourcetest.Run(t, m, &Source{Logger: discard, RuntimeEndpoint: c.Address})
	d := sourcetest.WaitFor(t, m, func(d status.Document) bool { _, ok := d.Condition(status.TypeOOMWatcher); return ok })
	if cnd, _ := d.Condition(status.TypeOOMWatcher); cnd.Status != condition.True {
		t.Fatalf("OOM watcher: %+v", cnd)
	}
	for _, h := range []string{runtimetest.RuntimeRunc, runtimetest.RuntimeCrun} {
		t.Run(h, func(t *testing.T) {
			pod := c.RunPod(t, runtimetest.PodOptions{Namespace: "oom-test", Name: "hog-" + h, RuntimeHandler: h})
			// tail buffers its whole input when it has no newline: the
			// allocation grows past the limit and the kernel kills tail
			// (the largest task in the memory cgroup), not the shell.
			ctr := runLimited(t, c, pod, "hog", 32<<20, "sh", "-c", "head -c 200m /dev/zero | tail; sleep 3600")
			d := sourcetest.WaitFor(t, m, func(d status.Document) bool {
				for _, k := range d.OOMKills.Recent {
					if k.Container != nil && k.Container.ContainerID == ctr.ID {
						return true
					}
				}
				return false
			})
			for _, k := range d.OOMKills.Recent {
				if k.Container == nil || k.Container.ContainerID != ctr.ID {
					continue
				}
				got := *k.Container
				if got.Namespace != "oom-test" || got.Pod != "hog-"+h || got.Container != "hog" || got.PodUID != pod.Config.Metadata.Uid {
					t.Errorf("kill of %s recorded as %+v", ctr.ID, got)
				}
				t.Logf("%s: killed %d (%s), resolved by %s", h, k.PID, k.Comm, got.ResolvedBy)
			}
		})
	}
}
