package cri

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/testenv/fakecri"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// runtimeServer is an in-process CRI runtime serving the two calls the
// resolver makes, with containerd's filter semantics unless ignoreFilter.
type runtimeServer struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	mu           sync.Mutex // for tests that change the containers while they are read
	containers   []*runtimeapi.Container
	info         map[string]map[string]string // container id -> verbose info
	exits        map[string]*runtimeapi.ContainerStatus
	ignoreFilter bool
}

// exit adds c as exited with status st.
func (s *runtimeServer) exit(c *runtimeapi.Container, st *runtimeapi.ContainerStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exits == nil {
		s.exits = map[string]*runtimeapi.ContainerStatus{}
	}
	s.containers = append(s.containers, c)
	s.exits[c.Id] = st
}

func (s *runtimeServer) ListContainers(_ context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*runtimeapi.Container
	f := req.GetFilter()
	for _, c := range s.containers {
		if !s.ignoreFilter && f != nil {
			if f.State != nil && c.State != f.State.State {
				continue
			}
			match := true
			for k, v := range f.LabelSelector {
				if c.Labels[k] != v {
					match = false
				}
			}
			if !match {
				continue
			}
		}
		out = append(out, c)
	}
	return &runtimeapi.ListContainersResponse{Containers: out}, nil
}

func (s *runtimeServer) ContainerStatus(_ context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.exits[req.ContainerId]; ok {
		return &runtimeapi.ContainerStatusResponse{Status: st}, nil
	}
	info, ok := s.info[req.ContainerId]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %q not found", req.ContainerId)
	}
	if !req.Verbose {
		info = nil
	}
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: req.ContainerId}, Info: info}, nil
}

func ctr(id, sandbox, ns, pod, name string, state runtimeapi.ContainerState, created int64) *runtimeapi.Container {
	return &runtimeapi.Container{Id: id, PodSandboxId: sandbox, State: state, CreatedAt: created,
		Labels: map[string]string{LabelPodNamespace: ns, LabelPodName: pod, LabelContainerName: name}}
}

func TestRuntimeResolver(t *testing.T) {
	srv := &runtimeServer{
		containers: []*runtimeapi.Container{
			ctr("c-old", "s1", "default", "web", "nginx", runtimeapi.ContainerState_CONTAINER_EXITED, 100),
			ctr("c-new", "s1", "default", "web", "nginx", runtimeapi.ContainerState_CONTAINER_RUNNING, 200),
			ctr("c-side", "s1", "default", "web", "sidecar", runtimeapi.ContainerState_CONTAINER_RUNNING, 150),
			ctr("c-restart-a", "s2", "prod", "db", "pg", runtimeapi.ContainerState_CONTAINER_RUNNING, 300),
			ctr("c-restart-b", "s2", "prod", "db", "pg", runtimeapi.ContainerState_CONTAINER_RUNNING, 400),
			ctr("c-nopid", "s3", "prod", "broken", "x", runtimeapi.ContainerState_CONTAINER_RUNNING, 1),
			ctr("c-badjson", "s3", "prod", "broken", "y", runtimeapi.ContainerState_CONTAINER_RUNNING, 1),
			ctr("c-gone", "s3", "prod", "broken", "z", runtimeapi.ContainerState_CONTAINER_RUNNING, 1),
		},
		info: map[string]map[string]string{
			"c-old":       {"info": `{"pid": 0}`},
			"c-new":       {"info": `{"pid": 4242, "sandboxID": "s1"}`},
			"c-side":      {"info": `{"pid": 4343}`},
			"c-restart-a": {"info": `{"pid": 10}`},
			"c-restart-b": {"info": `{"pid": 20}`},
			"c-nopid":     {"info": `{"runtimeType": "io.containerd.runc.v2"}`},
			"c-badjson":   {"info": `{pid`},
		},
	}
	tests := []struct {
		name    string
		target  Target
		want    Process
		wantErr error
		errSub  string
	}{
		{"running container", Target{Namespace: "default", Pod: "web", Container: "nginx"}, Process{ContainerID: "c-new", PodSandboxID: "s1", PID: 4242}, nil, ""},
		{"other container of the pod", Target{Namespace: "default", Pod: "web", Container: "sidecar"}, Process{ContainerID: "c-side", PodSandboxID: "s1", PID: 4343}, nil, ""},
		{"newest of two running", Target{Namespace: "prod", Pod: "db", Container: "pg"}, Process{ContainerID: "c-restart-b", PodSandboxID: "s2", PID: 20}, nil, ""},
		{"unknown namespace", Target{Namespace: "nope", Pod: "web", Container: "nginx"}, Process{}, ErrNotFound, "nope/web/nginx"},
		{"unknown pod", Target{Namespace: "default", Pod: "nope", Container: "nginx"}, Process{}, ErrNotFound, ""},
		{"unknown container", Target{Namespace: "default", Pod: "web", Container: "nope"}, Process{}, ErrNotFound, ""},
		{"verbose info without pid", Target{Namespace: "prod", Pod: "broken", Container: "x"}, Process{}, ErrNoPID, "c-nopid"},
		{"verbose info not JSON", Target{Namespace: "prod", Pod: "broken", Container: "y"}, Process{}, nil, "decode verbose info"},
		{"status call fails", Target{Namespace: "prod", Pod: "broken", Container: "z"}, Process{}, nil, "container status of prod/broken/z"},
	}
	for _, ignore := range []bool{false, true} {
		srv.ignoreFilter = ignore
		sock := fakecri.Serve(t, srv)
		r, err := Dial(sock)
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/ignoreFilter=%v", tt.name, ignore), func(t *testing.T) {
				var res Resolver = r
				got, err := res.Resolve(context.Background(), tt.target)
				if tt.wantErr == nil && tt.errSub == "" {
					if err != nil {
						t.Fatal(err)
					}
					// The runtime's status, as it answered.
					if got.Status.GetId() != tt.want.ContainerID {
						t.Errorf("Resolve's status %v, want the runtime's status of %s", got.Status, tt.want.ContainerID)
					}
					got.Status = nil
					if got != tt.want {
						t.Errorf("Resolve = %+v, want %+v", got, tt.want)
					}
					return
				}
				if err == nil {
					t.Fatalf("Resolve = %+v, want an error", got)
				}
				if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Errorf("error %v is not %v", err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.errSub) {
					t.Errorf("error %q does not contain %q", err, tt.errSub)
				}
			})
		}
		r.Close()
	}
}

func TestRuntimeResolverUnavailable(t *testing.T) {
	r, err := Dial(filepath.Join(t.TempDir(), "missing.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.Resolve(context.Background(), Target{Namespace: "a", Pod: "b", Container: "c"})
	if err == nil || errors.Is(err, ErrNotFound) || status.Code(errors.Unwrap(err)) != codes.Unavailable {
		t.Errorf("Resolve without a runtime = %v, want Unavailable, not ErrNotFound", err)
	}
}

func FuzzPIDFromVerboseInfo(f *testing.F) {
	f.Add(`{"pid": 4242}`)
	f.Add(`{"pid": -1}`)
	f.Add(`{"runtimeSpec": {}, "pid": 1e3}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, s string) {
		pid, err := PIDFromVerboseInfo(map[string]string{"info": s})
		if err == nil && pid <= 0 {
			t.Errorf("pid %d accepted", pid)
		}
	})
}

func TestSpecFromVerboseInfo(t *testing.T) {
	for _, tc := range []struct {
		name, info string
		wantRoot   string
		wantErr    bool
	}{
		{"containerd", `{"pid":7,"runtimeSpec":{"ociVersion":"1.1.0","root":{"path":"rootfs"},"linux":{"namespaces":[{"type":"network","path":"/var/run/netns/cni-1"}]}}}`, "rootfs", false},
		{"no spec", `{"pid":7}`, "", false},
		{"not JSON", `{`, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := SpecFromVerboseInfo(map[string]string{"info": tc.info})
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v", err)
			}
			root := ""
			if s != nil && s.Root != nil {
				root = s.Root.Path
			}
			if root != tc.wantRoot {
				t.Errorf("root = %q, want %q", root, tc.wantRoot)
			}
		})
	}
	if s, err := SpecFromVerboseInfo(nil); s != nil || err != nil {
		t.Errorf("no info: %v, %v", s, err)
	}
}

func FuzzSpecFromVerboseInfo(f *testing.F) {
	f.Add(`{"runtimeSpec": {"root": {"path": "rootfs"}}, "pid": 1}`)
	f.Add(`{"runtimeSpec": null}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = SpecFromVerboseInfo(map[string]string{"info": s})
	})
}
