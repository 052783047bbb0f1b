package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/internal/syncbuf"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

const envChild = "NODESHIM_API_TEST_CHILD"

// TestMain doubles as an unprivileged client: with envChild set to a
// socket path it drops to uid/gid 65534 (nobody), requests /status and
// prints the status code.
func TestMain(m *testing.M) {
	if sock := os.Getenv(envChild); sock != "" {
		if err := syscall.Setgid(65534); err != nil {
			fmt.Println("setgid:", err)
			os.Exit(1)
		}
		if err := syscall.Setuid(65534); err != nil {
			fmt.Println("setuid:", err)
			os.Exit(1)
		}
		resp, err := testutil.UnixHTTPClient(sock).Get("http://nodeshim/status")
		if err != nil {
			fmt.Println("get:", err)
			os.Exit(1)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode)
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func serve(t *testing.T, src Source, perm os.FileMode, logs io.Writer) string {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, SocketName)
	lSock, err := ListenSocket(sock, perm, -1)
	if err != nil {
		t.Fatal(err)
	}
	l := lSock.UnixListener
	srv := &http.Server{
		Handler:     NewHandler(src, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))}),
		ConnContext: ConnContext,
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		wg.Wait()
		os.Remove(sock)
	})
	return sock
}

func get(t *testing.T, sock, path string) (int, string) {
	t.Helper()
	resp, err := testutil.UnixHTTPClient(sock).Get("http://nodeshim" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestEndpoints(t *testing.T) {
	testutil.RequireRoot(t)
	m := status.New(nil)
	sock := serve(t, m, 0o600, io.Discard)

	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("socket %v %v, want a 0600 socket", fi.Mode(), err)
	}

	if code, body := get(t, sock, "/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, body := get(t, sock, "/readyz"); code != 503 || !strings.Contains(body, "Ready is Unknown") {
		t.Errorf("/readyz before any source = %d %q", code, body)
	}
	m.Set(condition.Condition{Type: "NetworkReady", Status: condition.True, Reason: "Up"},
		condition.Condition{Type: "ConfigHealthy", Status: condition.True, Reason: "ConfigActive"})
	if code, body := get(t, sock, "/readyz"); code != 200 {
		t.Errorf("/readyz when ready = %d %q", code, body)
	}

	tests := []struct {
		name  string
		path  string
		types []string
	}{
		{"all", "/status", []string{"NetworkReady", "ConfigHealthy", "Ready"}},
		{"filtered", "/status?conditions=Ready,NetworkReady", []string{"NetworkReady", "Ready"}},
		{"filter matching nothing", "/status?conditions=Nope", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := get(t, sock, tt.path)
			if code != 200 {
				t.Fatalf("%s = %d %s", tt.path, code, body)
			}
			var d status.Document
			if err := json.Unmarshal([]byte(body), &d); err != nil {
				t.Fatal(err)
			}
			var types []string
			for _, c := range d.Conditions {
				types = append(types, c.Type)
			}
			if strings.Join(types, ",") != strings.Join(tt.types, ",") {
				t.Errorf("%s conditions = %v, want %v", tt.path, types, tt.types)
			}
		})
	}
	if code, _ := get(t, sock, "/nope"); code != 404 {
		t.Errorf("/nope = %d", code)
	}
}

func TestPeerNotRootIsRefused(t *testing.T) {
	testutil.RequireRoot(t)
	logs := &syncbuf.Buffer{}
	// 0666 and searchable directories, so that nobody can connect at all
	// and the SO_PEERCRED check is what refuses it.
	sock := serve(t, status.New(nil), 0o666, logs)
	for d := filepath.Dir(sock); d != filepath.Dir(filepath.Dir(filepath.Dir(sock))); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+sock)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("client as nobody: %v: %s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "401" {
		t.Errorf("nobody got %q, want 401", got)
	}
	if !strings.Contains(logs.String(), "API request refused") || !strings.Contains(logs.String(), "uid=65534") {
		t.Errorf("refusal not logged with the uid: %q", logs.String())
	}
	// Root is still served.
	if code, _ := get(t, sock, "/status"); code != 200 {
		t.Errorf("root got %d", code)
	}
}

func TestListenSocketReplacesOnlySockets(t *testing.T) {
	dir := t.TempDir()
	t.Run("refuses a regular file", func(t *testing.T) {
		p := filepath.Join(dir, "file")
		if err := os.WriteFile(p, []byte("keep me"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ListenSocket(p, 0o600, -1); !errors.Is(err, ErrNotSocket) {
			t.Errorf("ListenSocket over a file = %v, want ErrNotSocket", err)
		}
		if b, _ := os.ReadFile(p); string(b) != "keep me" {
			t.Error("file was touched")
		}
	})
	t.Run("replaces a stale socket", func(t *testing.T) {
		p := filepath.Join(dir, "stale.sock")
		old, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		old.SetUnlinkOnClose(false)
		old.Close()
		lSock, err := ListenSocket(p, 0o600, -1)
		if err != nil {
			t.Fatal(err)
		}
		l := lSock.UnixListener
		defer os.Remove(p)
		defer l.Close()
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".nodeshim-sock-") {
				t.Errorf("temporary directory %s left", e.Name())
			}
		}
		c, err := net.Dial("unix", p)
		if err != nil {
			t.Fatalf("dial the new socket: %v", err)
		}
		c.Close()
	})
}
