package clustertest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/testenv/runtimetest"
)

// DeletePod deletes the Pod default/name at once and waits until it is
// gone; go test's -timeout bounds the wait.
func DeletePod(t testing.TB, cs kubernetes.Interface, name string) {
	t.Helper()
	ctx := context.Background()
	var grace int64
	err := cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Errorf("delete Pod %s: %v", name, err)
		return
	}
	for {
		if _, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Count waits until the running container ctr of Pod pod (found through
// CRI by kubelet's labels) has counted past n in its /count, and returns
// the count; go test's -timeout bounds the wait.
func (c *Cluster) Count(t testing.TB, pod, ctr string, n int) int {
	t.Helper()
	return countIn(t, c.Containerd, pod, ctr, n)
}

// countIn is Count in the runtime rt.
func countIn(t testing.TB, rt *runtimetest.Containerd, pod, ctr string, n int) int {
	t.Helper()
	var v int
	catUntil(t, rt, pod, ctr, "/count", func(out []byte) bool {
		c, err := strconv.Atoi(strings.TrimSpace(string(out)))
		v = c
		return err == nil && c > n
	})
	return v
}

// ReadFile waits until the running container ctr of Pod pod has the file
// path, and returns its content; go test's -timeout bounds the wait.
func (c *Cluster) ReadFile(t testing.TB, pod, ctr, path string) string {
	t.Helper()
	return readIn(t, c.Containerd, pod, ctr, path)
}

// readIn is ReadFile in the runtime rt.
func readIn(t testing.TB, rt *runtimetest.Containerd, pod, ctr, path string) string {
	t.Helper()
	var content string
	catUntil(t, rt, pod, ctr, path, func(out []byte) bool {
		content = string(out)
		return len(out) > 0
	})
	return content
}

// catUntil reads the file path of the running container ctr of Pod pod
// (found through CRI by kubelet's labels) every 50 ms until done takes
// what it read; go test's -timeout bounds the wait.
func catUntil(t testing.TB, rt *runtimetest.Containerd, pod, ctr, path string, done func(out []byte) bool) {
	t.Helper()
	ctx := context.Background()
	for {
		list, err := rt.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
			State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
			LabelSelector: map[string]string{runtimetest.LabelPodName: pod, runtimetest.LabelContainerName: ctr},
		}})
		if err != nil {
			t.Fatal(err)
		}
		for _, lc := range list.Containers {
			resp, err := rt.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: lc.Id, Cmd: []string{"cat", path}, Timeout: 10})
			if err == nil && resp.ExitCode == 0 && done(resp.Stdout) {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}
