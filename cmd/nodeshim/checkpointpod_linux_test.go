package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/criu/image"
	"github.com/nodeshim/nodeshim/shim/api"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
)

// TestCheckpointPodCLI checkpoints a two-container pod of the host's
// containerd 1.6 with `nodeshim checkpoint --namespace NS --pod POD
// --image REF` through the node API of a checkpoint service: the printed
// manifest names both containers, each has its archive and its checkpoint
// image in the pod checkpoint, and the pod counts on. An unknown pod
// fails naming the 404.
func TestCheckpointPodCLI(t *testing.T) {
	c := rt.Containerd(t)
	bin := criutest.Require(t)
	p := c.RunPod(t, runtimetest.PodOptions{})
	var ctrs []*runtimetest.Container
	for _, n := range []string{"web", "sidecar"} {
		ctrs = append(ctrs, p.Run(t, runtimetest.ContainerOptions{Name: n, Command: criCounter}))
	}
	for _, ctr := range ctrs {
		waitCRICount(t, ctr, 3)
	}
	dir := t.TempDir()
	svc := criCheckpointService(t, c, bin, filepath.Join(dir, "checkpoints"))
	sock := filepath.Join(dir, api.SocketName)
	lSock, err := api.ListenSocket(sock, 0o600, -1)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: api.NewHandler(status.New(nil), api.Options{
		Checkpoint: svc,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	}), ConnContext: api.ConnContext}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(lSock.UnixListener) }()
	defer func() { srv.Shutdown(context.Background()); <-done }()

	ns, name := p.Config.Metadata.Namespace, p.Config.Metadata.Name
	out, stderr, err := runSplit(t, "checkpoint", "--namespace", ns, "--pod", name, "--socket", sock, "--image", "localhost/nodeshim/"+name+":1", "-o", "json")
	if err != nil {
		t.Fatalf("checkpoint --pod: %v\n%s", err, stderr)
	}
	var ck podCheckpointOutput
	if err := json.Unmarshal([]byte(out), &ck); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("pod checkpoint %s: %v, %d bytes, frozen %.3fs, total %.3fs", ck.Path, ck.Containers, ck.SizeBytes, ck.FrozenSeconds, ck.TotalSeconds)
	if strings.Join(ck.Containers, ",") != "web,sidecar" || ck.Manifest.Name != name || ck.FrozenSeconds <= 0 {
		t.Errorf("output %+v, want pod %s with web then sidecar, frozen", ck, name)
	}
	for _, mc := range ck.Manifest.Containers {
		if want := "localhost/nodeshim/" + name + "-" + mc.Name + ":1"; mc.CheckpointImageRef != want || mc.CheckpointImage == "" {
			t.Errorf("container %s: checkpoint image %q (%s), want %s", mc.Name, mc.CheckpointImageRef, mc.CheckpointImage, want)
			continue
		}
		// The image is a valid OCI layout archive of the container's.
		f, err := os.Open(filepath.Join(ck.Path, mc.CheckpointImage))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(io.LimitReader(f, 64<<20))
		f.Close()
		if err != nil || !strings.Contains(string(b), image.CRIUName) || !strings.Contains(string(b), mc.Name) {
			t.Errorf("%s does not carry %s naming %s: %v", mc.CheckpointImage, image.CRIUName, mc.Name, err)
		}
	}
	for _, ctr := range ctrs {
		waitCRICount(t, ctr, waitCRICount(t, ctr, 0))
	}

	_, stderr, err = runSplit(t, "checkpoint", "--namespace", ns, "--pod", "no-such-pod", "--socket", sock)
	if err == nil || !strings.Contains(stderr+err.Error(), "404") {
		t.Errorf("unknown pod: %v\n%s; want a 404", err, stderr)
	}
}
