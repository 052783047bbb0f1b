//go:build nodevm

package nodetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestOOMKillNamedByPod: a container of a pod under kubepods.slice, with a
// 32 MiB memory limit, runs dd with a 64 MiB buffer; the kernel kills dd
// in the container's memory cgroup, and nodeshim serve's GET /status lists
// the kill with the pod's namespace, name and UID and the container's
// name and id, resolved through CRI (containerd's systemd cgroupsPath)
// on pure cgroup v2.
func TestOOMKillNamedByPod(t *testing.T) {
	requireNode(t)
	p := runPod(t, "oom")
	start := time.Now()
	c := p.runContainer(t, containerOptions{Name: "hog", MemoryLimit: 32 << 20,
		Command: []string{"sh", "-c", "dd if=/dev/zero of=/dev/null bs=64M count=1; sleep 3600"}})
	var doc status.Document
	var kill status.OOMKill
	testutil.Eventually(t, "GET /status lists the OOM kill of "+p.Name+"/"+c.Name, func() error {
		doc = status.Document{}
		if err := getJSON(t, "/status", &doc); err != nil {
			return err
		}
		if !doc.OOMKills.Watching {
			return fmt.Errorf("OOM kills not watched: %s", doc.OOMKills.Reason)
		}
		for _, k := range doc.OOMKills.Recent {
			if k.Container != nil && k.Container.ContainerID == c.ID {
				kill = k
				return nil
			}
		}
		return fmt.Errorf("%d OOM kills seen, %d recent, none in container %s", doc.OOMKills.Total, len(doc.OOMKills.Recent), c.ID[:12])
	})
	took := time.Since(start)
	got := kill.Container
	if got.Namespace != p.Namespace || got.Pod != p.Name || got.PodUID != p.UID || got.Container != c.Name {
		t.Errorf("OOM kill in %s named %s/%s (uid %s) container %q; want %s/%s (uid %s) container %q",
			c.ID[:12], got.Namespace, got.Pod, got.PodUID, got.Container, p.Namespace, p.Name, p.UID, c.Name)
	}
	if got.ResolvedBy == "" {
		t.Errorf("OOM kill in %s: resolvedBy empty", c.ID[:12])
	}
	if kill.Comm != "dd" || kill.PID == 0 {
		t.Errorf("OOM victim comm %q pid %d; want dd", kill.Comm, kill.PID)
	}
	t.Logf("OOM kill of %s (pid %d, rss %d B, cgroup id %d) named %s/%s/%s, resolved by %s, listed %s after the container was started; watcher hook %s",
		kill.Comm, kill.PID, kill.RSSBytes, kill.CgroupID, got.Namespace, got.Pod, got.Container, got.ResolvedBy,
		took.Round(time.Millisecond), doc.OOMKills.Hook)
}
