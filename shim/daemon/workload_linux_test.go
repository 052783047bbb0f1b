package daemon

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/runtimes/cri"
	"github.com/nodeshim/nodeshim/testenv/testutil"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

// Environment of the test binary started as a workload or a client.
const (
	envWorkload    = testworkload.EnvKind
	envWorkloadDir = testworkload.EnvDir
	envWorkloadMiB = testworkload.EnvMiB
	envClientSock  = "NODESHIM_DAEMON_TEST_SOCK"
	envClientUID   = "NODESHIM_DAEMON_TEST_UID"
	envClientReqs  = "NODESHIM_DAEMON_TEST_REQUESTS"
)

// runClient switches to the uid and gid in envClientUID, sends each
// request of envClientReqs ("METHOD PATH" separated by ";") to the socket
// and prints the status codes separated by spaces.
func runClient() {
	id, _ := strconv.Atoi(os.Getenv(envClientUID))
	if err := syscall.Setgid(id); err != nil {
		fmt.Println("setgid:", err)
		os.Exit(1)
	}
	if err := syscall.Setuid(id); err != nil {
		fmt.Println("setuid:", err)
		os.Exit(1)
	}
	c := testutil.UnixHTTPClient(os.Getenv(envClientSock))
	var codes []string
	for _, r := range strings.Split(os.Getenv(envClientReqs), ";") {
		method, path, _ := strings.Cut(r, " ")
		req, _ := http.NewRequest(method, "http://nodeshim"+path, nil)
		resp, err := c.Do(req)
		if err != nil {
			codes = append(codes, "error:"+err.Error())
			continue
		}
		resp.Body.Close()
		codes = append(codes, strconv.Itoa(resp.StatusCode))
	}
	fmt.Println(strings.Join(codes, " "))
	os.Exit(0)
}

// asUser runs the test binary as a client with uid and gid id and returns
// its status codes.
func asUser(t *testing.T, sock string, id int, reqs ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envWorkload+"=client", envClientSock+"="+sock,
		envClientUID+"="+strconv.Itoa(id), envClientReqs+"="+strings.Join(reqs, ";"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("client as uid %d: %v: %s", id, err, out)
	}
	return strings.TrimSpace(string(out))
}

// criServer is an in-process CRI runtime that knows some containers by
// kubelet's labels and reports each one's pid in verbose info, as
// containerd does.
type criServer struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	mu         sync.Mutex
	containers map[string]int // "ns/pod/container" -> pid
}

func (s *criServer) ListContainers(_ context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*runtimeapi.Container
	sel := req.GetFilter().GetLabelSelector()
	for key := range s.containers {
		p := strings.Split(key, "/")
		labels := map[string]string{cri.LabelPodNamespace: p[0], cri.LabelPodName: p[1], cri.LabelContainerName: p[2]}
		match := true
		for k, v := range sel {
			if labels[k] != v {
				match = false
			}
		}
		if match {
			out = append(out, &runtimeapi.Container{Id: "ctr-" + strings.ReplaceAll(key, "/", "-"), PodSandboxId: "sandbox-" + p[1],
				State: runtimeapi.ContainerState_CONTAINER_RUNNING, Labels: labels, CreatedAt: 1})
		}
	}
	return &runtimeapi.ListContainersResponse{Containers: out}, nil
}

func (s *criServer) ContainerStatus(_ context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, pid := range s.containers {
		if req.ContainerId == "ctr-"+strings.ReplaceAll(key, "/", "-") {
			return &runtimeapi.ContainerStatusResponse{
				Status: &runtimeapi.ContainerStatus{Id: req.ContainerId, State: runtimeapi.ContainerState_CONTAINER_RUNNING},
				Info:   map[string]string{"info": fmt.Sprintf(`{"pid": %d}`, pid)},
			}, nil
		}
	}
	return nil, fmt.Errorf("no container %s", req.ContainerId)
}
