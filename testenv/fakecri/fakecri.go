// Package critest serves a test's in-process CRI runtime over gRPC on a
// unix socket, as containerd and CRI-O serve theirs.
package fakecri

import (
	"net"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Serve serves srv's RuntimeService on a unix socket in a temporary
// directory until the test ends, and returns the socket's path.
func Serve(t testing.TB, srv runtimeapi.RuntimeServiceServer) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(g, srv)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = g.Serve(l) }()
	t.Cleanup(func() { g.Stop(); wg.Wait() })
	return sock
}
