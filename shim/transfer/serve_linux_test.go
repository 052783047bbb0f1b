package transfer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(ctx, daemon.Options{RootDir: filepath.Join(dir, "root"), LockFile: filepath.Join(dir, "nodeshim.lock"),
			ConfigSource: source, HostRoot: filepath.Join(dir, "host"), ProcRoot: "/proc", Out: io.Discard,
			Logger: slog.New(slog.NewTextHandler(logs, nil)),
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
		return "https://" + a.String(), logs
	case err := <-done:
		t.Fatalf("serve of %s: %v\n%s", n.Name, err, logs.String())
	}
	return "", nil
}

// TestServeReceives runs two `nodeshim serve` instances, each with its own
// root and checkpoint directory and its node's certificate: node-b's
// configuration receives transfers (checkpoint.transfer) from the nodes
// its trust policy trusts, node-a's does not. A pod checkpoint sent from
// node-a is stored by node-b's serve; one over node-b's bound and one sent
// to node-a are refused, and leave nothing.
func TestServeReceives(t *testing.T) {
	testutil.RequireRoot(t)
	root := t.TempDir()
	ca := transfertest.NewCA(t, root, "cluster-ca")
	a, b := transfertest.NewNode(t, root, ca, "node-a"), transfertest.NewNode(t, root, ca, "node-b")
	policy := filepath.Join(root, "node-b", "trust.yaml")
	if err := os.WriteFile(policy, []byte(fmt.Sprintf("keys:\n- keyID: %s\n  node: node-a\n", seal.KeyID(a.Keys.Public))), 0o600); err != nil {
		t.Fatal(err)
	}
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
