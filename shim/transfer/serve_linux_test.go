package transfer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/internal/syncbuf"
	"github.com/nodeshim/nodeshim/shim/config"
	"github.com/nodeshim/nodeshim/shim/daemon"
	"github.com/nodeshim/nodeshim/shim/transfer"
	"github.com/nodeshim/nodeshim/shim/transfer/transfertest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// serve runs `nodeshim serve` (daemon.Run) for node n with its TLS
// listener on loopback and config as its ShimConfiguration's checkpoint
// section, until the test ends; it returns the listener's URL.
func serve(t *testing.T, root string, n *transfertest.Node, checkpoint string) (url string, logs *syncbuf.Buffer) {
	url, _, logs = serveWithSocket(t, root, n, checkpoint)
	return url, logs
}

// serveWithSocket is serve, and returns the node socket too.
func serveWithSocket(t *testing.T, root string, n *transfertest.Node, checkpoint string) (url, socket string, logs *syncbuf.Buffer) {
	t.Helper()
	dir := filepath.Join(root, n.Name, "serve")
	source := filepath.Join(dir, "source")
	if err := os.MkdirAll(source, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := "apiVersion: nodeshim.io/v1alpha1\nkind: ShimConfiguration\n" +
		"api:\n  tcpAddress: 127.0.0.1:0\n  tlsCertFile: " + n.CertFile + "\n  tlsKeyFile: " + n.KeyFile + "\n  clientCAFile: " + n.CAFile + "\n" +
		"checkpoint:\n  dir: " + n.Dir + "\n" + checkpoint
	if err := os.WriteFile(filepath.Join(source, config.BaseFile), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logs = &syncbuf.Buffer{}
	tcp := make(chan net.Addr, 1)
	sock := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(ctx, daemon.Options{RootDir: filepath.Join(dir, "root"), LockFile: filepath.Join(dir, "nodeshim.lock"),
			ConfigSource: source, HostRoot: filepath.Join(dir, "host"), ProcRoot: "/proc", Out: io.Discard,
			Logger: slog.New(slog.NewTextHandler(logs, nil)),
			Listening: func(s string) {
				select {
				case sock <- s:
				default:
				}
			},
			TCPListening: func(a net.Addr) {
				select {
				case tcp <- a:
				default:
				}
			}})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve of %s: %v", n.Name, err)
		}
	})
	select {
	case a := <-tcp:
		return "https://" + a.String(), <-sock, logs
	case err := <-done:
		t.Fatalf("serve of %s: %v\n%s", n.Name, err, logs.String())
	}
	return "", "", nil
}

// trustingNodes makes node-a and node-b under a new root, with
// certificates from one CA, and node-b's trust policy file, which trusts
// node-a's signing key.
func trustingNodes(t *testing.T) (root string, ca *transfertest.CA, a, b *transfertest.Node, policy string) {
	t.Helper()
	root = t.TempDir()
	ca = transfertest.NewCA(t, root, "cluster-ca")
	a, b = transfertest.NewNode(t, root, ca, "node-a"), transfertest.NewNode(t, root, ca, "node-b")
	policy = filepath.Join(root, "node-b", "trust.yaml")
	if err := os.WriteFile(policy, []byte(fmt.Sprintf("keys:\n- keyID: %s\n  node: node-a\n", seal.KeyID(a.Keys.Public))), 0o600); err != nil {
		t.Fatal(err)
	}
	return root, ca, a, b, policy
}

// TestServeReceives runs two `nodeshim serve` instances, each with its own
// root and checkpoint directory and its node's certificate: node-b's
// configuration receives transfers (checkpoint.transfer) from the nodes
// its trust policy trusts, node-a's does not. A pod checkpoint sent from
// node-a is stored by node-b's serve; one over node-b's bound and one sent
// to node-a are refused, and leave nothing.
func TestServeReceives(t *testing.T) {
	testutil.RequireRoot(t)
	root, _, a, b, policy := trustingNodes(t)
	bURL, bLogs := serve(t, root, b, "  trustPolicy: "+policy+"\n  encryption:\n    identities: ["+b.Keys.IdentityFile+"]\n"+
		"  transfer:\n    enabled: true\n    maxBytes: 4Mi\n")
	aURL, _ := serve(t, root, a, "")

	name, files := transfertest.PodCheckpoint(t, a.Dir, "shop", "cart", 1<<20)
	sent, err := transfer.Send(context.Background(), a.Dir, name, transfer.SendOptions{Client: a.Client(t), URL: bURL, Seal: a.SealTo(t, b.Keys.Recipient)})
	if err != nil {
		t.Fatalf("send to node-b's serve: %v\n%s", err, bLogs.String())
	}
	if sent.Path != filepath.Join(b.Dir, name) || sent.From != "node-a" {
		t.Errorf("sent %+v", sent)
	}
	for f, want := range files {
		if got, err := os.ReadFile(filepath.Join(b.Dir, name, f)); err != nil || string(got) != string(want) {
			t.Errorf("%s on node-b: %d bytes (%v)", f, len(got), err)
		}
	}

	big, _ := transfertest.PodCheckpoint(t, a.Dir, "shop", "big", 5<<20)
	_, err = transfer.Send(context.Background(), a.Dir, big, transfer.SendOptions{Client: a.Client(t), URL: bURL, Seal: a.SealTo(t, b.Keys.Recipient)})
	var re *transfer.RefusedError
	if !errors.As(err, &re) || re.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("over checkpoint.transfer.maxBytes: %v, want 413", err)
	}

	_, err = transfer.Send(context.Background(), b.Dir, name, transfer.SendOptions{Client: b.Client(t), URL: aURL, Seal: b.SealTo(t, a.Keys.Recipient)})
	if !errors.As(err, &re) || re.Code != http.StatusNotFound {
		t.Errorf("to node-a, which receives none: %v, want 404", err)
	}
	testutil.Eventually(t, "only the stored pod checkpoint on node-b, nothing on node-a", func() error {
		eb, _ := os.ReadDir(b.Dir)
		ea, _ := os.ReadDir(a.Dir)
		if len(eb) != 1 || eb[0].Name() != name || len(ea) != 2 {
			return fmt.Errorf("node-b %v, node-a %v", eb, ea)
		}
		return nil
	})
}

// TestServeSends runs two `nodeshim serve` instances: node-a's sends
// (checkpoint.transfer.send) when root asks over its node socket, with its
// certificate and signing key, to node-b's, which receives. node-a refuses
// a recipient it is not configured to encrypt to, and a receiver whose
// certificate does not name the node asked for; neither sends a byte.
func TestServeSends(t *testing.T) {
	testutil.RequireRoot(t)
	root, ca, a, b, policy := trustingNodes(t)
	c := transfertest.NewNode(t, root, ca, "node-c")
	bURL, _ := serve(t, root, b, "  trustPolicy: "+policy+"\n  encryption:\n    identities: ["+b.Keys.IdentityFile+"]\n  transfer:\n    enabled: true\n")
	_, aSock, aLogs := serveWithSocket(t, root, a, "  signing:\n    keyFile: "+a.Keys.SigningKeyFile+"\n    nodeName: node-a\n"+
		"  encryption:\n    recipients: ["+b.Keys.Recipient+"]\n  transfer:\n    send: true\n")
	name, files := transfertest.PodCheckpoint(t, a.Dir, "shop", "cart", 1<<20)
	local := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", aSock)
	}}}
	defer local.CloseIdleConnections()
	ask := func(req transfer.SendRequest) (int, string) {
		t.Helper()
		body, _ := json.Marshal(req)
		resp, err := local.Post("http://nodeshim"+transfer.Path(name)+"/send", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	for _, tt := range []struct {
		name string
		req  transfer.SendRequest
		code int
		says string
	}{
		{"recipient not configured", transfer.SendRequest{Node: "node-b", URL: bURL, Recipient: c.Keys.Recipient}, http.StatusBadRequest, "is not among this node's checkpoint.encryption.recipients"},
		{"certificate of another node", transfer.SendRequest{Node: "node-c", URL: bURL, Recipient: b.Keys.Recipient}, http.StatusBadGateway, "system:node:node-b\\\", not node node-c"},
		{"not https", transfer.SendRequest{Node: "node-b", URL: strings.Replace(bURL, "https", "http", 1), Recipient: b.Keys.Recipient}, http.StatusBadRequest, "want https://host:port"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out := ask(tt.req)
			if code != tt.code || !strings.Contains(out, tt.says) {
				t.Fatalf("%d %s, want %d saying %q", code, out, tt.code, tt.says)
			}
			if e, _ := os.ReadDir(b.Dir); len(e) > 0 {
				t.Fatalf("node-b holds %v", e)
			}
		})
	}
	code, out := ask(transfer.SendRequest{Node: "node-b", URL: bURL, Recipient: b.Keys.Recipient})
	if code != http.StatusOK {
		t.Fatalf("send: %d %s\n%s", code, out, aLogs.String())
	}
	var sent transfer.Sent
	if err := json.Unmarshal([]byte(out), &sent); err != nil || sent.From != "node-a" || sent.Path != filepath.Join(b.Dir, name) {
		t.Fatalf("sent %s (%v)", out, err)
	}
	for f, want := range files {
		if got, err := os.ReadFile(filepath.Join(b.Dir, name, f)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s on node-b: %d bytes (%v)", f, len(got), err)
		}
	}
}

// TestServeTransferInfo: `nodeshim serve` answers GET /transfers on its
// node socket with what a sender needs, its TLS listener's port and its
// identity's recipient, when it receives transfers, and 404 when it does
// not: what the reporter publishes as the Node's transfer labels.
func TestServeTransferInfo(t *testing.T) {
	testutil.RequireRoot(t)
	root, _, a, b, policy := trustingNodes(t)
	bURL, bSock, _ := serveWithSocket(t, root, b, "  trustPolicy: "+policy+"\n  encryption:\n    identities: ["+b.Keys.IdentityFile+"]\n  transfer:\n    enabled: true\n")
	_, aSock, _ := serveWithSocket(t, root, a, "")
	get := func(sock string) (int, string) {
		t.Helper()
		c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
		defer c.CloseIdleConnections()
		resp, err := c.Get("http://nodeshim/transfers")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	code, out := get(bSock)
	var in transfer.Info
	if err := json.Unmarshal([]byte(out), &in); code != http.StatusOK || err != nil {
		t.Fatalf("node-b: %d %s (%v)", code, out, err)
	}
	if want := bURL[strings.LastIndex(bURL, ":")+1:]; fmt.Sprint(in.Port) != want || len(in.Recipients) != 1 || in.Recipients[0] != b.Keys.Recipient {
		t.Fatalf("node-b's info %+v; want port %s and recipient %s", in, want, b.Keys.Recipient)
	}
	if code, out := get(aSock); code != http.StatusNotFound || !strings.Contains(out, "receives no transfers") {
		t.Fatalf("node-a, which receives none: %d %s", code, out)
	}
}
