package main

import (
	"archive/tar"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/shim/api"
	"github.com/nodeshim/nodeshim/shim/checkpoint"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestCheckpointImageRestoredByContainerd2 is the path of a container
// moved by kubelet's runtime: `nodeshim checkpoint --namespace --pod
// --container` through the node API of a checkpoint service on containerd
// 2.3.7's CRI, `nodeshim checkpoint image` of the archive, `ctr images
// import` of the image file, and CRI CreateContainer from the image name
// in a new pod, then StartContainer: containerd restores it with CRIU and
// the counter goes on. Beside it, containerd's own `crictl checkpoint
// --export` of the same container, restored the same way, for the
// timings.
func TestCheckpointImageRestoredByContainerd2(t *testing.T) {
	c := rt.Containerd2(t)
	bin := criutest.Require(t)
	pod := c.RunPod(t, runtimetest.PodOptions{})
	ctr := pod.Run(t, runtimetest.ContainerOptions{Name: "counter", Command: criCounter})
	before := waitCRICount(t, ctr, 5)

	dir := t.TempDir()
	svc := criCheckpointService(t, c, bin, dir)
	sock := filepath.Join(dir, api.SocketName)
	lSock, err := api.ListenSocket(sock, 0o600, -1)
	if err != nil {
		t.Fatal(err)
	}
	l := lSock.UnixListener
	srv := &http.Server{Handler: api.NewHandler(status.New(nil), api.Options{
		Checkpoint: svc,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	}), ConnContext: api.ConnContext}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(l) }()
	defer func() { srv.Shutdown(context.Background()); <-done }()

	start := time.Now()
	out, stderr, err := runSplit(t, "checkpoint", "--namespace", pod.Config.Metadata.Namespace, "--pod", pod.Config.Metadata.Name,
		"--container", ctr.Name, "--socket", sock, "-o", "json")
	if err != nil {
		t.Fatalf("checkpoint: %v\n%s", err, stderr)
	}
	tCheckpoint := time.Since(start)
	var ck checkpointOutput
	if err := json.Unmarshal([]byte(out), &ck); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// Through the API the frozen time and pages come from the archive.
	if ck.FrozenSeconds <= 0 || ck.PagesWritten == 0 {
		t.Errorf("checkpoint through the API: frozen %gs, %d pages written; want both from the archive's dump statistics", ck.FrozenSeconds, ck.PagesWritten)
	}
	file := filepath.Join(t.TempDir(), "counter.oci.tar")
	ref := "localhost/nodeshim/counter-checkpoint:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	start = time.Now()
	if _, stderr, err = runSplit(t, "checkpoint", "image", ck.Path, "--tag", ref, "--out-file", file, "-o", "json"); err != nil {
		t.Fatalf("checkpoint image: %v\n%s", err, stderr)
	}
	tImage := time.Since(start)

	// containerd's own checkpoint of the same container, which runs on.
	own := filepath.Join(t.TempDir(), "containerd.tar")
	start = time.Now()
	if out, err := c.Crictl(t, "checkpoint", "--export="+own, ctr.ID).CombinedOutput(); err != nil {
		t.Fatalf("crictl checkpoint --export: %v: %s", err, out)
	}
	tOwn := time.Since(start)
	ownFrozen := archiveFrozen(t, own)
	ownSize := fileSize(t, own)
	ctr.Stop(t, 0)
	ctr.Remove(t)

	start = time.Now()
	if out, err := c.Ctr("images", "import", file).CombinedOutput(); err != nil {
		t.Fatalf("ctr images import %s: %v: %s", file, err, out)
	}
	if err := c.WaitImage(ref); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Ctr("images", "rm", ref).Run() })
	tImport := time.Since(start)
	tRestore := restoreByCRI(t, c, ref, before)
	tOwnRestore := restoreByCRI(t, c, own, before)

	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	t.Logf("%s, busybox counter:", c.Version)
	// Both frozen times as CRIU recorded them in the archive.
	t.Logf("nodeshim: checkpoint (CLI through the node API) %s, frozen %s, archive %d bytes; checkpoint image %s; ctr images import %s; CRI restore from the image %s",
		ms(tCheckpoint), ms(archiveFrozen(t, ck.Path)), fileSize(t, ck.Path), ms(tImage), ms(tImport), ms(tRestore))
	t.Logf("containerd: crictl checkpoint --export %s, frozen %s, archive %d bytes; CRI restore from the archive %s",
		ms(tOwn), ms(ownFrozen), ownSize, ms(tOwnRestore))
}

// waitCRICount waits until ctr's /count is above n and returns it; go
// test's -timeout bounds the wait.
// criCounter is a container command that writes a rising count to /count
// every 100 ms.
var criCounter = []string{"sh", "-c", "i=0; while true; do i=$((i+1)); echo $i > /count; sleep 0.1; done"}

// criCheckpointService is a checkpoint service on c's CRI endpoint with
// CRIU bin, writing under dir; it is closed after t.
func criCheckpointService(t *testing.T, c *runtimetest.Containerd, bin criu.Binary, dir string) *checkpoint.Service {
	t.Helper()
	svc := checkpoint.New(checkpoint.Options{
		Settings: func() checkpoint.Settings {
			return checkpoint.Settings{Enabled: true, Dir: dir, DefaultTimeout: time.Minute, RuntimeEndpoint: c.Address}
		},
		FindCriu: func() (criu.Binary, error) { return bin, nil },
		Model:    status.New(nil),
	})
	t.Cleanup(func() { svc.Close() })
	return svc
}

func waitCRICount(t *testing.T, ctr *runtimetest.Container, n int) int {
	t.Helper()
	var c int
	testutil.Eventually(t, fmt.Sprintf("container %s counts past %d", ctr.Name, n), func() error {
		out, _, code := ctr.Exec(t, "cat", "/count")
		var err error
		if c, err = strconv.Atoi(strings.TrimSpace(out)); code != 0 || err != nil {
			return fmt.Errorf("cat /count: exit %d: %q", code, out)
		}
		if c <= n {
			return fmt.Errorf("it counts %d", c)
		}
		return nil
	})
	return c
}

// restoreByCRI restores the checkpoint img (an image name or an archive's
// path) through CRI CreateContainer and StartContainer in a new pod of c,
// checks that the counter goes on from at least before, removes the
// container and returns how long create and start took.
func restoreByCRI(t *testing.T, c *runtimetest.Containerd, img string, before int) time.Duration {
	t.Helper()
	pod := c.RunPod(t, runtimetest.PodOptions{})
	start := time.Now()
	ctr := pod.CreateContainer(t, runtimetest.ContainerOptions{Name: "counter", Image: img})
	ctr.Start(t)
	took := time.Since(start)
	if st := ctr.Status(t); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container restored from %s is %v", img, st.State)
	}
	restored := waitCRICount(t, ctr, 0)
	if restored < before {
		t.Fatalf("container restored from %s counts %d, below the %d seen before the checkpoint: it was not restored", img, restored, before)
	}
	next := waitCRICount(t, ctr, restored)
	t.Logf("restored from %s: count %d before the checkpoint, %d then %d", filepath.Base(img), before, restored, next)
	ctr.Stop(t, 0)
	ctr.Remove(t)
	return took
}

// archiveFrozen is CRIU's frozen time recorded in a checkpoint archive's
// stats-dump.
func archiveFrozen(t *testing.T, path string) time.Duration {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s has no %s: %v", path, criu.StatsDump, err)
		}
		if strings.TrimPrefix(h.Name, "./") != criu.StatsDump {
			continue
		}
		tmp := filepath.Join(t.TempDir(), criu.StatsDump)
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		st, err := criu.ReadDumpStats(tmp)
		if err != nil {
			t.Fatal(err)
		}
		return time.Duration(st.GetFrozenTime()) * time.Microsecond
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
