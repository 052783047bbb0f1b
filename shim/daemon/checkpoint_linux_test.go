package daemon

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/internal/syncbuf"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/fakecri"
	"github.com/nodeshim/nodeshim/testenv/testutil"
	"github.com/nodeshim/nodeshim/testenv/testworkload"
)

// requireCriu gates a test on root and a criu that passes `criu check`
// (make installs one and exports NODESHIM_CRIU).
func requireCriu(t testing.TB) {
	t.Helper()
	testutil.RequireRoot(t)
	criutest.RequireChecked(t)
}

// daemonRun is a running daemon of a test.
type daemonRun struct {
	opts   Options
	sock   string
	tcp    net.Addr
	c      *http.Client
	out    *syncbuf.Buffer
	logs   *syncbuf.Buffer
	cancel context.CancelFunc
	done   chan error

	mu sync.Mutex
	// tcpAddrs are the TCP listeners' addresses, one per start.
	tcpAddrs []net.Addr
}

// lastTCP is the address of the TCP listener started last, nil if none.
func (d *daemonRun) lastTCP() net.Addr {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.tcpAddrs) == 0 {
		return nil
	}
	return d.tcpAddrs[len(d.tcpAddrs)-1]
}

// startDaemon runs the daemon with the configuration document cfg in its
// source directory, on the real /proc, with an empty host root otherwise.
func startDaemon(t testing.TB, cfg string) *daemonRun {
	t.Helper()
	return startDaemonWith(t, func(o *Options) {
		if cfg != "" {
			writeSource(t, o.ConfigSource, cfg)
		}
	})
}

// startDaemonWith runs the daemon with options changed by mod.
func startDaemonWith(t testing.TB, mod func(*Options)) *daemonRun {
	t.Helper()
	dir := t.TempDir()
	d := &daemonRun{out: &syncbuf.Buffer{}, logs: &syncbuf.Buffer{}, done: make(chan error, 1)}
	d.opts = Options{
		RootDir:      filepath.Join(dir, "root"),
		LockFile:     filepath.Join(dir, "nodeshim.lock"),
		ConfigSource: filepath.Join(dir, "source"),
		HostRoot:     filepath.Join(dir, "host"),
		ProcRoot:     "/proc",
		Out:          d.out,
		Logger:       slog.New(slog.NewTextHandler(d.logs, nil)),
	}
	mod(&d.opts)
	listening := make(chan string, 1)
	tcp := make(chan net.Addr, 1)
	d.opts.Listening = func(s string) { listening <- s }
	d.opts.TCPListening = func(a net.Addr) {
		d.mu.Lock()
		d.tcpAddrs = append(d.tcpAddrs, a)
		d.mu.Unlock()
		select {
		case tcp <- a:
		default:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	go func() { d.done <- Run(ctx, d.opts) }()
	select {
	case d.sock = <-listening:
	case err := <-d.done:
		t.Fatalf("Run: %v", err)
	}
	select {
	case d.tcp = <-tcp:
	default:
	}
	d.c = testutil.UnixHTTPClient(d.sock)
	t.Cleanup(func() { d.stop(t) })
	return d
}

// stop shuts the daemon down once and returns Run's error.
func (d *daemonRun) stop(t testing.TB) error {
	t.Helper()
	if d.cancel == nil {
		return nil
	}
	d.cancel()
	d.cancel = nil
	return <-d.done
}

func (d *daemonRun) do(t *testing.T, method, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://nodeshim"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := d.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (d *daemonRun) status(t *testing.T) status.Document {
	t.Helper()
	return getStatus(t, d.c)
}

func (d *daemonRun) wait(t *testing.T, ok func(status.Document) bool) status.Document {
	t.Helper()
	return waitStatus(t, d.c, ok)
}

func cond(d status.Document, typ string) (condition.Condition, bool) {
	for _, c := range d.Conditions {
		if c.Type == typ {
			return c, true
		}
	}
	return condition.Condition{}, false
}

// checkpointConfig enables checkpoints into dir through the runtime at
// endpoint.
func checkpointConfig(endpoint, dir string, extra string) string {
	return "apiVersion: nodeshim.io/v1alpha1\nkind: ShimConfiguration\n" +
		"containerRuntimeEndpoint: " + endpoint + "\n" +
		"checkpoint:\n  enabled: true\n  dir: " + dir + "\n  defaultTimeout: 2m\n" + extra
}

// onlyArchives lists dir and fails on anything but archives: no work
// directory, no temp file.
func onlyArchives(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "checkpoint-") || !strings.HasSuffix(e.Name(), ".tar") {
			t.Errorf("%s holds %s, which is not an archive", dir, e.Name())
			continue
		}
		out = append(out, e.Name())
	}
	return out
}

// TestCheckpointEndpoint drives POST /checkpoint end to end: the daemon
// resolves the container through an in-process CRI runtime to a real
// process that the test started, and real CRIU dumps it. Each case checks
// kubelet's status code; the archive, the history, the condition, the
// metrics, and that the workload runs on are checked too.
func TestCheckpointEndpoint(t *testing.T) {
	requireCriu(t)
	pid, wdir := testworkload.Start(t, "count", 16)
	tcpPid, tcpDir := testworkload.Start(t, "count-tcp", 4)
	rt := &criServer{containers: map[string]int{"default/web-0/app": pid, "default/web-0/tcp": tcpPid}}
	endpoint := "unix://" + fakecri.Serve(t, rt)
	ckDir := filepath.Join(t.TempDir(), "archives")
	d := startDaemon(t, checkpointConfig(endpoint, ckDir, ""))

	tests := []struct {
		name     string
		method   string
		path     string
		wantCode int
		wantBody string
		result   string // the history record it adds, "" for none
	}{
		{"checkpoint", "POST", "/checkpoint/default/web-0/app?timeout=120", 200, `"items"`, status.CheckpointSucceeded},
		{"default timeout", "POST", "/checkpoint/default/web-0/app", 200, `"items"`, status.CheckpointSucceeded},
		{"last timeout wins, 0 is the default", "POST", "/checkpoint/default/web-0/app?timeout=x&timeout=0", 200, `"items"`, status.CheckpointSucceeded},
		{"unknown container", "POST", "/checkpoint/default/web-0/nope", 404, "container not found", ""},
		{"unknown pod", "POST", "/checkpoint/default/web-1/app", 404, "container not found", ""},
		{"unknown namespace", "POST", "/checkpoint/kube-system/web-0/app", 404, "container not found", ""},
		{"invalid name", "POST", "/checkpoint/Default/web-0/app", 404, "invalid namespace name", ""},
		{"unparsable timeout", "POST", "/checkpoint/default/web-0/app?timeout=soon", 500, "cannot parse value of timeout parameter", ""},
		{"negative timeout", "POST", "/checkpoint/default/web-0/app?timeout=-1", 500, "cannot parse value of timeout parameter", ""},
		// CRIU fails to dump the workload's inet socket on this host: its
		// own error comes back.
		{"CRIU fails on an inet socket", "POST", "/checkpoint/default/web-0/tcp", 500, "Dumping FAILED", status.CheckpointFailed},
		{"GET is not a checkpoint", "GET", "/checkpoint/default/web-0/app", 404, "", ""},
	}
	records := 0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := d.do(t, tt.method, tt.path)
			if code != tt.wantCode || !strings.Contains(body, tt.wantBody) {
				t.Fatalf("%s %s = %d %s, want %d with %q", tt.method, tt.path, code, body, tt.wantCode, tt.wantBody)
			}
			doc := d.status(t)
			if tt.result == "" {
				if len(doc.Checkpoints) != records {
					t.Errorf("history has %d records, want %d: %+v", len(doc.Checkpoints), records, doc.Checkpoints)
				}
				return
			}
			records++
			if len(doc.Checkpoints) != records {
				t.Fatalf("history has %d records, want %d", len(doc.Checkpoints), records)
			}
			rec := doc.Checkpoints[len(doc.Checkpoints)-1]
			c, _ := cond(doc, status.TypeCheckpoint)
			if rec.Result != tt.result {
				t.Errorf("record %+v, want result %s", rec, tt.result)
			}
			switch tt.result {
			case status.CheckpointSucceeded:
				var resp struct{ Items []string }
				if err := json.Unmarshal([]byte(body), &resp); err != nil || len(resp.Items) != 1 {
					t.Fatalf("body %s: %v", body, err)
				}
				fi, err := os.Stat(resp.Items[0])
				if err != nil || fi.Mode().Perm() != 0o600 || filepath.Dir(resp.Items[0]) != ckDir {
					t.Errorf("archive %s: %v %v, want mode 0600 in %s", resp.Items[0], fi.Mode(), err, ckDir)
				}
				if rec.Path != resp.Items[0] || rec.PID != pid || rec.ContainerID != "ctr-default-web-0-app" || rec.SizeBytes != fi.Size() || rec.FrozenSeconds <= 0 {
					t.Errorf("record %+v does not describe %s of pid %d", rec, resp.Items[0], pid)
				}
				if c.Status != condition.True || c.Reason != "Checkpointed" {
					t.Errorf("%s = %+v", status.TypeCheckpoint, c)
				}
				testworkload.AssertRunning(t, pid, wdir)
			case status.CheckpointFailed:
				if !strings.Contains(rec.Error, "Dumping FAILED") || c.Status != condition.False || c.Reason != "CheckpointFailed" || c.Severity != condition.SeverityWarning {
					t.Errorf("record %+v, condition %+v", rec, c)
				}
				testworkload.AssertRunning(t, tcpPid, tcpDir)
			}
		})
	}
	if got := len(onlyArchives(t, ckDir)); got != 3 {
		t.Errorf("%d archives in %s, want 3", got, ckDir)
	}

	_, metrics := d.do(t, "GET", "/metrics")
	for _, want := range []string{
		`nodeshim_checkpoints_total{result="Succeeded"} 3`,
		`nodeshim_checkpoints_total{result="Failed"} 1`,
		`nodeshim_checkpoint_duration_seconds_count{result="Succeeded"} 3`,
		`nodeshim_checkpoint_frozen_seconds_count 3`,
		`nodeshim_checkpoints_in_flight 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// Turned off in the configuration: 404, as kubelet with the feature gate off.
	writeSource(t, d.opts.ConfigSource, strings.Replace(checkpointConfig(endpoint, ckDir, ""), "enabled: true", "enabled: false", 1))
	d.wait(t, func(doc status.Document) bool {
		code, _ := d.do(t, "POST", "/checkpoint/default/web-0/app")
		return code == 404
	})
	if code, body := d.do(t, "POST", "/checkpoint/default/web-0/app"); code != 404 || !strings.Contains(body, "disabled") {
		t.Errorf("disabled: %d %s", code, body)
	}
	if err := d.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestCheckpointAbortedByShutdown stops the daemon while CRIU is writing
// the pages of a workload it has frozen: the request fails with 500, the
// workload runs on (not stopped, not traced, still counting), and nothing
// is left in the checkpoint directory.
func TestCheckpointAbortedByShutdown(t *testing.T) {
	requireCriu(t)
	pid, wdir := testworkload.Start(t, "count", 512)
	endpoint := "unix://" + fakecri.Serve(t, &criServer{containers: map[string]int{"default/big-0/app": pid}})
	ckDir := filepath.Join(t.TempDir(), "archives")
	d := startDaemon(t, checkpointConfig(endpoint, ckDir, ""))

	type answer struct {
		code int
		body string
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := d.c.Post("http://nodeshim/checkpoint/default/big-0/app?timeout=300", "", nil)
		if err != nil {
			answered <- answer{body: err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answered <- answer{resp.StatusCode, string(b)}
	}()
	// Wait until CRIU has frozen the workload and writes its pages.
	for dumping := false; !dumping; {
		works, _ := filepath.Glob(filepath.Join(ckDir, ".nodeshim-work-*", "checkpoint", "pages-*.img"))
		for _, p := range works {
			if fi, err := os.Stat(p); err == nil && fi.Size() > 0 {
				dumping = true
			}
		}
		time.Sleep(time.Millisecond) // go test's -timeout bounds the wait
	}
	doc := d.status(t)
	if c, _ := cond(doc, status.TypeCheckpoint); c.Reason != condition.ReasonInProgress || c.Status != condition.False || c.Severity != condition.SeverityInfo {
		t.Errorf("during the checkpoint %s = %+v, want False/Info InProgress", status.TypeCheckpoint, c)
	}
	if err := d.stop(t); err != nil {
		t.Fatalf("Run after an aborted checkpoint: %v", err)
	}
	a := <-answered
	t.Logf("answer of the aborted checkpoint: %d %s", a.code, a.body)
	if a.code != 500 || !strings.Contains(a.body, "shutting down") {
		t.Errorf("checkpoint during shutdown = %d %s, want 500 naming the shutdown", a.code, a.body)
	}
	testworkload.AssertRunning(t, pid, wdir)
	if got := onlyArchives(t, ckDir); len(got) != 0 {
		t.Errorf("archives after an aborted checkpoint: %v", got)
	}
	if _, err := os.Stat(d.sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left: %v", err)
	}
	if !strings.Contains(d.logs.String(), "checkpoint aborted") {
		t.Errorf("abort not logged:\n%s", d.logs.String())
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key into dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nodeshim"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestAPIAccess checks the listeners the configuration asks for: TCP with
// TLS and a bearer token (401 without it, logged), and a reporter uid that
// may read the status endpoints over the unix socket but never checkpoint,
// while another uid is refused everything.
func TestAPIAccess(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	cert, key, pool := selfSigned(t, dir)
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const reporter, stranger = 65534, 65533
	d := startDaemonWith(t, func(o *Options) {
		// Every refusal is logged, so that each one's reason is checked
		// (serve logs one line per peer and minute).
		o.APILimits.RefusalLogInterval = time.Nanosecond
		writeSource(t, o.ConfigSource, checkpointConfig("unix:///nonexistent.sock", filepath.Join(dir, "ck"),
			"api:\n  tcpAddress: 127.0.0.1:0\n  tlsCertFile: "+cert+"\n  tlsKeyFile: "+key+"\n  tokenFile: "+tokenFile+
				"\n  readOnlyUIDs: [65534]\n"))
	})
	if d.tcp == nil {
		t.Fatal("no TCP listener")
	}

	t.Run("tcp", func(t *testing.T) {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: pool}}}
		tests := []struct {
			name   string
			method string
			path   string
			auth   string
			want   int
		}{
			{"no token", "GET", "/status", "", 401},
			{"wrong token", "GET", "/status", "Bearer nope", 401},
			{"basic auth", "GET", "/status", "Basic czNjcmV0LXRva2Vu", 401},
			{"token", "GET", "/status", "Bearer s3cret-token", 200},
			{"token reads metrics", "GET", "/metrics", "Bearer s3cret-token", 200},
			{"token may checkpoint (unknown container: the runtime is down)", "POST", "/checkpoint/default/web-0/app", "Bearer s3cret-token", 500},
			{"no token may not checkpoint", "POST", "/checkpoint/default/web-0/app", "", 401},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				req, _ := http.NewRequest(tt.method, "https://"+d.tcp.String()+tt.path, nil)
				if tt.auth != "" {
					req.Header.Set("Authorization", tt.auth)
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != tt.want {
					t.Errorf("%s %s with %q = %d, want %d", tt.method, tt.path, tt.auth, resp.StatusCode, tt.want)
				}
			})
		}
		// Plain HTTP on the TLS port gets no answer from the API.
		resp, err := http.Get("http://" + d.tcp.String() + "/status")
		if err == nil {
			if resp.StatusCode == 200 {
				t.Error("plain HTTP served /status")
			}
			resp.Body.Close()
		}
		if !strings.Contains(d.logs.String(), "API request refused") || !strings.Contains(d.logs.String(), "bad bearer token") {
			t.Errorf("refusals not logged:\n%s", d.logs.String())
		}
	})

	t.Run("unix socket", func(t *testing.T) {
		// The daemon makes its root dir searchable for the reporter uids.
		if fi, err := os.Stat(filepath.Dir(d.sock)); err != nil || fi.Mode().Perm() != 0o711 {
			t.Fatalf("root dir with reporter uids: %v %v, want 0711", fi.Mode(), err)
		}
		// Let other uids reach the root dir (the test's temporary
		// directories are 0700): SO_PEERCRED must be what decides.
		for p := filepath.Dir(filepath.Dir(d.sock)); p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
			if err := os.Chmod(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		fi, err := os.Stat(d.sock)
		if err != nil || fi.Mode().Perm() != 0o666 {
			t.Fatalf("socket with reporter uids: %v %v, want 0666", fi.Mode(), err)
		}
		reads := []string{"GET /status", "GET /report", "GET /healthz", "GET /readyz", "GET /metrics"}
		tests := []struct {
			name string
			uid  int
			reqs []string
			want string
		}{
			{"reporter reads", reporter, reads, "200 503 200 503 200"},
			{"reporter may not checkpoint", reporter, []string{"POST /checkpoint/default/web-0/app"}, "403"},
			{"stranger gets nothing", stranger, append(reads, "POST /checkpoint/default/web-0/app"), "401 401 401 401 401 401"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				got := asUser(t, d.sock, tt.uid, tt.reqs...)
				// /report is 503 (not collected: no report func in tests)
				// and /readyz 503 (not Ready): both were served.
				if got != tt.want {
					t.Errorf("uid %d %v = %s, want %s", tt.uid, tt.reqs, got, tt.want)
				}
			})
		}
		if !strings.Contains(d.logs.String(), "read-only caller") || !strings.Contains(d.logs.String(), "uid=65533") {
			t.Errorf("refusals not logged with the peer:\n%s", d.logs.String())
		}
	})
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
}
