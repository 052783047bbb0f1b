package transfer

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/criu/pod"
	"github.com/nodeshim/nodeshim/internal/syncbuf"
	"github.com/nodeshim/nodeshim/shim/transfer/transfertest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// node is one shim of the test: transfertest's, and the receiver it
// serves with its bounds and log.
type node struct {
	*transfertest.Node
	recv              *Receiver
	logs              syncbuf.Buffer
	maxBytes, minFree int64
	token             []byte
}

func newNode(t *testing.T, root string, c *transfertest.CA, name string) *node {
	return &node{Node: transfertest.NewNode(t, root, c, name)}
}

// serve serves n's node API with a Receiver that trusts the nodes of
// trusted.
func (n *node) serve(t *testing.T, trusted ...*node) {
	t.Helper()
	var tn []*transfertest.Node
	for _, o := range trusted {
		tn = append(tn, o.Node)
	}
	var err error
	n.recv, err = NewReceiver(ReceiverOptions{Dir: n.Dir, Open: n.Trusting(t, tn...),
		MaxBytes: n.maxBytes, MinFreeBytes: n.minFree, Logger: slog.New(slog.NewTextHandler(&n.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	n.Serve(t, n.recv, n.token)
}

// entries lists dir.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestTransfer sends a pod checkpoint between two node APIs on loopback
// over mutual TLS with certificates made here: stored on the receiver
// byte for byte; every refusal (a client certificate of another CA, a
// signer the receiver does not trust or that is not the certificate's
// node, a stream for another node's key, tampered bytes, over the size or
// the disk bound, a cut stream, a name taken, a bearer token instead of a
// certificate) leaves nothing in the receiver's checkpoint directory.
func TestTransfer(t *testing.T) {
	testutil.RequireRoot(t)
	root := t.TempDir()
	good := transfertest.NewCA(t, root, "cluster-ca")
	a, b, c := newNode(t, root, good, "node-a"), newNode(t, root, good, "node-b"), newNode(t, root, good, "node-c")
	b.token = []byte("a-token")
	b.serve(t, a)
	name, files := transfertest.PodCheckpoint(t, a.Dir, "shop", "cart", 3<<20)
	aClient := a.Client(t)
	ctx := context.Background()

	empty := func(t *testing.T) {
		t.Helper()
		testutil.Eventually(t, "the receiver's checkpoint directory empty", func() error {
			if e := entries(t, b.Dir); len(e) > 0 {
				return fmt.Errorf("left behind: %v", e)
			}
			return nil
		})
	}
	refused := func(t *testing.T, err error, code int, why string) {
		t.Helper()
		var re *RefusedError
		if !errors.As(err, &re) || re.Code != code || !strings.Contains(re.Message, why) {
			t.Fatalf("send: %v, want a %d refusal saying %q", err, code, why)
		}
		empty(t)
	}

	t.Run("refusals", func(t *testing.T) {
		t.Run("client certificate of another CA", func(t *testing.T) {
			rogue := transfertest.NewCA(t, root, "rogue-ca")
			cf, kf := rogue.NodeCert(t, root, "node-a")
			// Go's client offers no certificate that the server's CAs did
			// not issue: the API answers 401.
			_, err := Send(ctx, a.Dir, name, SendOptions{Client: transfertest.Client(t, cf, kf, good.File), URL: b.URL, Seal: a.SealTo(t, b.Keys.Recipient)})
			refused(t, err, http.StatusUnauthorized, "unauthorized")
			// Forced on the server, it fails the handshake.
			forced := transfertest.Client(t, cf, kf, good.File)
			cfg := forced.Transport.(*http.Transport).TLSClientConfig
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cfg.Certificates[0], nil }
			_, err = Send(ctx, a.Dir, name, SendOptions{Client: forced, URL: b.URL, Seal: a.SealTo(t, b.Keys.Recipient)})
			// TLS 1.3: the server verifies the client's certificate after
			// the client's handshake ends, and closes the connection.
			if err == nil || errors.As(err, new(*RefusedError)) {
				t.Fatalf("send with a rogue certificate forced: %v, want the connection refused", err)
			}
			empty(t)
		})
		t.Run("signed as another node than the certificate's", func(t *testing.T) {
			_, err := Send(ctx, a.Dir, name, SendOptions{Client: c.Client(t), URL: b.URL, Seal: a.SealTo(t, b.Keys.Recipient)})
			refused(t, err, http.StatusForbidden, `signed as node "node-a", sent by node "node-c"`)
		})
		t.Run("signer not trusted", func(t *testing.T) {
			transfertest.PodCheckpoint(t, c.Dir, "shop", "cart", 1<<10)
			_, err := Send(ctx, c.Dir, name, SendOptions{Client: c.Client(t), URL: b.URL, Seal: c.SealTo(t, b.Keys.Recipient)})
			refused(t, err, http.StatusForbidden, "refused by the trust policy")
		})
		t.Run("encrypted to another node", func(t *testing.T) {
			_, err := Send(ctx, a.Dir, name, SendOptions{Client: aClient, URL: b.URL, Seal: a.SealTo(t, c.Keys.Recipient)})
			refused(t, err, http.StatusForbidden, "none of the 1 configured age identities")
		})
		t.Run("tampered bytes", func(t *testing.T) {
			_, err := Send(ctx, a.Dir, name, SendOptions{Client: aClient, URL: b.URL, Seal: a.SealTo(t, b.Keys.Recipient),
				wrap: func(r io.Reader) io.Reader { return &flip{r: r, at: 100 << 10} }})
			refused(t, err, http.StatusForbidden, "digest mismatch")
		})
		t.Run("cut mid-way", func(t *testing.T) {
			_, err := Send(ctx, a.Dir, name, SendOptions{Client: aClient, URL: b.URL, Seal: a.SealTo(t, b.Keys.Recipient),
				wrap: func(r io.Reader) io.Reader { return &cut{r: r, after: 1 << 20} }})
			if err == nil {
				t.Fatal("a cut transfer was stored")
			}
			empty(t)
		})
		t.Run("manifest of another pod", func(t *testing.T) {
			other := filepath.Join(root, "other")
			n, _ := transfertest.PodCheckpoint(t, other, "shop", "cart", 1<<10)
			m, err := pod.ReadManifest(filepath.Join(other, n))
			if err != nil {
				t.Fatal(err)
			}
			m.Name = "web"
			mb, _ := json.Marshal(m)
			if err := os.WriteFile(filepath.Join(other, n, pod.ManifestFile), mb, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err = Send(ctx, other, n, SendOptions{Client: aClient, URL: b.URL, Seal: a.SealTo(t, b.Keys.Recipient)})
			refused(t, err, http.StatusBadRequest, "the manifest is of pod shop/web")
		})
		t.Run("bearer token, no certificate", func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPut, b.URL+Path(name), strings.NewReader("x"))
			req.Header.Set("Authorization", "Bearer a-token")
			pool := x509.NewCertPool()
			pool.AddCert(good.Cert)
			cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
			defer cl.CloseIdleConnections()
			resp, err := cl.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("a bearer token's transfer answered %d, want 401", resp.StatusCode)
			}
			empty(t)
		})
		t.Run("not a pod checkpoint's name", func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPut, b.URL+Path("..%2Fetc"), strings.NewReader("x"))
			resp, err := aClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("answered %d, want 400", resp.StatusCode)
			}
			empty(t)
		})
	})

	t.Run("stored", func(t *testing.T) {
		sent, err := Send(ctx, a.Dir, name, SendOptions{Client: aClient, URL: b.URL, Seal: a.SealTo(t, b.Keys.Recipient)})
		if err != nil {
			t.Fatalf("send: %v\nreceiver: %s", err, b.logs.String())
		}
		if sent.Name != name || sent.From != "node-a" || sent.Path != filepath.Join(b.Dir, name) || sent.Stored != sent.Plain || sent.Sealed != sent.Received {
			t.Errorf("sent %+v", sent)
		}
		if e := entries(t, b.Dir); len(e) != 1 || e[0] != name {
			t.Fatalf("receiver's checkpoint directory: %v, want only %s", e, name)
		}
		for f, want := range files {
			got, err := os.ReadFile(filepath.Join(b.Dir, name, f))
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s: %d bytes (%v), want the %d sent", f, len(got), err, len(want))
			}
			fi, err := os.Stat(filepath.Join(b.Dir, name, f))
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("%s mode %v (%v), want 0600", f, fi.Mode(), err)
			}
		}
		t.Logf("%d bytes sealed and sent in %v", sent.Sealed, sent.Duration)

		_, err = Send(ctx, a.Dir, name, SendOptions{Client: aClient, URL: b.URL, Seal: a.SealTo(t, b.Keys.Recipient)})
		var re *RefusedError
		if !errors.As(err, &re) || re.Code != http.StatusConflict {
			t.Fatalf("second send of %s: %v, want 409", name, err)
		}
		if e := entries(t, b.Dir); len(e) != 1 {
			t.Fatalf("after the refused second send: %v", e)
		}
	})

	t.Run("bounds", func(t *testing.T) {
		small := newNode(t, root, good, "node-small")
		small.maxBytes = 1 << 20
		small.serve(t, a)
		_, err := Send(ctx, a.Dir, name, SendOptions{Client: aClient, URL: small.URL, Seal: a.SealTo(t, small.Keys.Recipient)})
		var re *RefusedError
		if !errors.As(err, &re) || re.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("send over the bound: %v, want 413", err)
		}
		// Without a declared size the bytes themselves are bounded.
		req, _ := http.NewRequest(http.MethodPut, small.URL+Path(name), io.LimitReader(rand.Reader, 2<<20))
		req.ContentLength = -1
		resp, err := aClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("undeclared stream over the bound answered %d, want 413", resp.StatusCode)
			}
		}
		if e := entries(t, small.Dir); len(e) > 0 {
			t.Fatalf("left behind: %v", e)
		}

		full := newNode(t, root, good, "node-full")
		full.minFree = 1 << 62
		full.serve(t, a)
		_, err = Send(ctx, a.Dir, name, SendOptions{Client: aClient, URL: full.URL, Seal: a.SealTo(t, full.Keys.Recipient)})
		if !errors.As(err, &re) || re.Code != http.StatusInsufficientStorage {
			t.Fatalf("send to a full disk: %v, want 507", err)
		}
		if e := entries(t, full.Dir); len(e) > 0 {
			t.Fatalf("left behind: %v", e)
		}
	})
}

// flip flips one byte of a stream at offset at.
type flip struct {
	r   io.Reader
	at  int64
	off int64
}

func (f *flip) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if f.at >= f.off && f.at < f.off+int64(n) {
		p[f.at-f.off] ^= 0xff
	}
	f.off += int64(n)
	return n, err
}

// cut ends a stream with an error after some bytes.
type cut struct {
	r     io.Reader
	after int64
}

func (c *cut) Read(p []byte) (int, error) {
	if c.after <= 0 {
		return 0, errors.New("connection lost")
	}
	if int64(len(p)) > c.after {
		p = p[:c.after]
	}
	n, err := c.r.Read(p)
	c.after -= int64(n)
	return n, err
}
