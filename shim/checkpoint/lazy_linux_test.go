package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/pod"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/runtimes/cri"
	"github.com/nodeshim/nodeshim/shim/api"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/shim/transfer/transfertest"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// lazyService is containerdService with the node API settings a lazy
// pod checkpoint's page servers need: 127.0.0.1 and a node certificate
// of a CA made here.
func lazyService(t *testing.T, c *runtimetest.Containerd, bin criu.Binary, dir string, model *status.Model) *Service {
	t.Helper()
	tlsDir := t.TempDir()
	ca := transfertest.NewCA(t, tlsDir, "cluster-ca")
	cert, key := ca.NodeCert(t, tlsDir, "source")
	ps := PageServerSettings{TCPAddress: "127.0.0.1:10250", CertFile: cert, KeyFile: key, CAFile: ca.File}
	svc := New(Options{
		Settings: func() Settings {
			return Settings{Enabled: true, Dir: dir, DefaultTimeout: 2 * time.Minute, RuntimeEndpoint: c.Address, PageServer: ps}
		},
		FindCriu: func() (criu.Binary, error) { return bin, nil },
		LockDir:  filepath.Join(t.TempDir(), "locks"),
		Model:    model,
	})
	t.Cleanup(func() { svc.Close() })
	return svc
}

// do sends method path to the node API at url and returns the status
// code and body.
func do(t *testing.T, url, method, path string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestCheckpointPodLazy asks a real containerd 2 pod of two counters for
// a lazy pod checkpoint through the node API (POST
// /checkpoint/{namespace}/{pod}?lazy=true): the answer comes once the pod
// checkpoint is published, its manifest names a page server per
// container on the node's address, and the counters are held while
// nobody fetches their memory. DELETE /checkpoints/{name}, as a failed
// migration sends it, ends the serve: the pod checkpoint is gone, both
// counters run on, untraced and thawed, and the record says aborted.
// Close ends a second serve the same way.
func TestCheckpointPodLazy(t *testing.T) {
	c := rt.Containerd2(t)
	bin := criutest.Require(t)
	if _, err := os.Stat("/proc/sys/vm/unprivileged_userfaultfd"); err != nil {
		testutil.Skip(t, "kernel without userfaultfd: %v", err)
	}
	p, ctrs, before := counterPod(t, c)
	dir := filepath.Join(t.TempDir(), "checkpoints")
	model := status.New(nil)
	svc := lazyService(t, c, bin, dir, model)
	srv := httptest.NewServer(api.NewHandler(status.New(nil), api.Options{Checkpoint: svc,
		Auth: func(*http.Request) (api.Access, string) { return api.FullAccess, "test" }}))
	defer srv.Close()
	ns, name := p.Config.Metadata.Namespace, p.Config.Metadata.Name

	code, b := do(t, srv.URL, "POST", "/checkpoint/"+ns+"/"+name+"?lazy=true&timeout=120")
	if code != http.StatusOK {
		t.Fatalf("POST ?lazy=true = %d %s", code, b)
	}
	var out struct{ Items []string }
	if err := json.Unmarshal(b, &out); err != nil || len(out.Items) != 1 {
		t.Fatalf("answer %s: %v", b, err)
	}
	path := out.Items[0]
	m, err := pod.ReadManifest(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Containers) != 2 {
		t.Fatalf("containers %+v", m.Containers)
	}
	for _, mc := range m.Containers {
		ps, err := criu.ParsePageServer(mc.PageServer)
		if err != nil || ps.Address != "127.0.0.1" {
			t.Errorf("container %s: page server %q (%v), want one on 127.0.0.1", mc.Name, mc.PageServer, err)
		}
	}

	resolver, err := cri.Dial(c.Address)
	if err != nil {
		t.Fatal(err)
	}
	defer resolver.Close()
	var pids []int
	for _, ctr := range ctrs {
		proc, err := resolver.Resolve(context.Background(), criu.ContainerRef{Namespace: ns, Pod: name, Container: ctr.Name})
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, proc.PID)
		if f := frozen(t, proc.PID); f == "" {
			t.Errorf("container %s runs while its memory is served", ctr.Name)
		}
	}
	// A second checkpoint of the pod waits for the serve to end.
	if _, err := svc.CheckpointPod(context.Background(), PodRef{Namespace: ns, Name: name}, PodOptions{}); !errors.Is(err, ErrBusy) {
		t.Errorf("checkpoint of the pod being served: %v, want ErrBusy", err)
	}

	code, b = do(t, srv.URL, "DELETE", "/checkpoints/"+filepath.Base(path))
	if code != http.StatusNoContent {
		t.Fatalf("DELETE = %d %s", code, b)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pod checkpoint %s after DELETE: %v", path, err)
	}
	for i, ctr := range ctrs {
		if f := frozen(t, pids[i]); f != "" {
			t.Errorf("container %s after DELETE: %s", ctr.Name, f)
		}
		after := waitCount(t, ctr, before[i])
		t.Logf("%s counted %d before, %d after the lazy serve was given back", ctr.Name, before[i], after)
	}
	recs := model.Snapshot().Checkpoints
	if len(recs) == 0 || recs[len(recs)-1].Result != status.CheckpointAborted {
		t.Errorf("records %+v, want the last aborted", recs)
	}

	// nodeshim stopping ends a serve too: Close gives the pod back. (The
	// counts are read before: an exec into a frozen container waits.)
	for i, ctr := range ctrs {
		before[i] = count(t, ctr)
	}
	res, err := svc.CheckpointPod(context.Background(), PodRef{Namespace: ns, Name: name}, PodOptions{Lazy: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Path == "" || len(res.Manifest.Containers) != 2 || res.Manifest.Containers[0].PageServer == "" || res.Frozen <= 0 {
		t.Errorf("lazy result %+v, want the published pod checkpoint with its page servers", res)
	}
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(res.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pod checkpoint %s after Close: %v", res.Path, err)
	}
	for i, ctr := range ctrs {
		if f := frozen(t, pids[i]); f != "" {
			t.Errorf("container %s after Close: %s", ctr.Name, f)
		}
		waitCount(t, ctr, before[i])
	}
}

// TestCheckpointPodLazyRefusals: without the node API's TCP address and
// TLS files, or with checkpoint images, a lazy pod checkpoint is refused
// before anything is resolved, naming what is missing; the API answers
// 400.
func TestCheckpointPodLazyRefusals(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name string
		ps   PageServerSettings
		opts PodOptions
		want []string
	}{
		{"no settings", PageServerSettings{}, PodOptions{Lazy: true}, []string{"api.tcpAddress", "api.tlsCertFile", "api.tlsKeyFile", "api.clientCAFile"}},
		{"no CA", PageServerSettings{TCPAddress: "10.0.0.7:10250", CertFile: "/n.crt", KeyFile: "/n.key"}, PodOptions{Lazy: true}, []string{"api.clientCAFile"}},
		{"any address", PageServerSettings{TCPAddress: "0.0.0.0:10250", CertFile: "/n.crt", KeyFile: "/n.key", CAFile: "/ca.crt"}, PodOptions{Lazy: true}, []string{"api.tcpAddress"}},
		{"image", PageServerSettings{TCPAddress: "10.0.0.7:10250", CertFile: "/n.crt", KeyFile: "/n.key", CAFile: "/ca.crt"}, PodOptions{Lazy: true, ImageRef: "registry.example/x"}, []string{"image"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			svc := New(Options{Settings: func() Settings {
				return Settings{Enabled: true, Dir: dir, RuntimeEndpoint: "/nonexistent.sock", PageServer: tt.ps}
			}, Model: status.New(nil)})
			defer svc.Close()
			_, err := svc.CheckpointPod(context.Background(), PodRef{Namespace: "default", Name: "web-0"}, tt.opts)
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("%v, want class InvalidArgument", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v does not name %s", err, w)
				}
			}
			if tt.opts.ImageRef != "" {
				return
			}
			srv := httptest.NewServer(api.NewHandler(status.New(nil), api.Options{Checkpoint: svc,
				Auth: func(*http.Request) (api.Access, string) { return api.FullAccess, "test" }}))
			defer srv.Close()
			if code, b := do(t, srv.URL, "POST", "/checkpoint/default/web-0?lazy=1"); code != http.StatusBadRequest || !strings.Contains(string(b), tt.want[0]) {
				t.Errorf("POST ?lazy=1 = %d %s, want 400 naming %s", code, b, tt.want[0])
			}
		})
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("%s holds %d entries", dir, len(ents))
	}
}
