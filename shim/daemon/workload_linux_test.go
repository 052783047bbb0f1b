package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/shim/cri"
)

// Environment of the test binary started as a workload or a client.
const (
	envWorkload    = "NODESHIM_DAEMON_TEST_WORKLOAD"
	envWorkloadDir = "NODESHIM_DAEMON_TEST_DIR"
	envWorkloadMiB = "NODESHIM_DAEMON_TEST_MIB"
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
	c := unixClient(os.Getenv(envClientSock))
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

func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
}

// startWorkload starts the test binary as workload kind in a session of
// its own (CRIU dumps a tree only with its session leader), waits for its
// pid file and kills it when the test ends.
func startWorkload(t testing.TB, kind string, mib int) (int, string) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envWorkload+"="+kind, envWorkloadDir+"="+dir, envWorkloadMiB+"="+strconv.Itoa(mib))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start workload %s: %v", kind, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	for {
		b, err := os.ReadFile(filepath.Join(dir, "pid"))
		if err == nil && len(b) > 0 {
			pid, err := strconv.Atoi(string(b))
			if err != nil {
				t.Fatal(err)
			}
			return pid, dir
		}
		time.Sleep(10 * time.Millisecond) // go test's -timeout bounds the start-up
	}
}

// counted returns how many counts the counter in dir has logged.
func counted(t testing.TB, dir string) int {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "log"))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		n++
	}
	return n
}

// assertRunning checks that pid runs on, neither stopped nor traced, and
// that its counter still advances.
func assertRunning(t *testing.T, pid int, dir string) {
	t.Helper()
	st, err := criu.ReadProcState("/proc", pid)
	if err != nil {
		t.Fatalf("workload %d: %v", pid, err)
	}
	if st.Gone() || st.Stopped() || st.TracerPid != 0 {
		t.Fatalf("workload %d is %s", pid, st)
	}
	n := counted(t, dir)
	for counted(t, dir) < n+3 {
		time.Sleep(10 * time.Millisecond) // go test's -timeout bounds it: a frozen workload fails here
	}
	if st, _ := criu.ReadProcState("/proc", pid); st.Stopped() || st.TracerPid != 0 {
		t.Fatalf("workload %d is %s", pid, st)
	}
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

// serveCRI serves s on a unix socket until the test ends and returns its
// endpoint.
func serveCRI(t testing.TB, s *criServer) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(g, s)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = g.Serve(l) }()
	t.Cleanup(func() { g.Stop(); wg.Wait() })
	return "unix://" + sock
}

// startHog starts the hog workload, which joins the memory cgroup named in
// dir/cgroup and allocates until it is killed, and returns its pid.
func startHog(t testing.TB, dir string) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envWorkload+"=hog", envWorkloadDir+"="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start hog: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd.Process.Pid
}
