package fakecri

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type runtime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
}

func (runtime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "critest"}, nil
}

func TestServe(t *testing.T) {
	sock := Serve(t, runtime{})
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	v, err := runtimeapi.NewRuntimeServiceClient(conn).Version(t.Context(), &runtimeapi.VersionRequest{})
	if err != nil || v.RuntimeName != "critest" {
		t.Fatalf("Version over %s: %+v, %v", sock, v, err)
	}
}
