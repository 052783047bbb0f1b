package transfer

import (
	"bytes"
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
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/criu/archive/seal/sealtest"
	"github.com/nodeshim/nodeshim/criu/pod"
	"github.com/nodeshim/nodeshim/shim/api"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// ca is a certificate authority made in the test.
type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string
}

func newCA(t *testing.T, dir, name string) *ca {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	c := &ca{cert: cert, key: key, file: filepath.Join(dir, name+".crt")}
	writePEM(t, c.file, "CERTIFICATE", der)
	return c
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// nodeCert issues a node's certificate (CommonName system:node:NODE, for
// 127.0.0.1, server and client) and returns its certificate and key files.
func (c *ca) nodeCert(t *testing.T, dir, node string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, c.cert.Subject.CommonName+"-"+node+".crt"), filepath.Join(dir, c.cert.Subject.CommonName+"-"+node+".key")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", kder)
	return certFile, keyFile
}

// node is one shim: its checkpoint directory, keys, certificate and, once
// served, its API's TLS listener with a transfer receiver.
type node struct {
	name              string
	dir               string
	keys              sealtest.Keys
	certFile, keyFile string
	url               string
	recv              *Receiver
	logs              bytes.Buffer
	srv               *http.Server
	caFile            string
	maxBytes, minFree int64
	servedWithBearer  []byte
}

func newNode(t *testing.T, root string, c *ca, name string) *node {
	t.Helper()
	n := &node{name: name, dir: filepath.Join(root, name, "checkpoints"), caFile: c.file}
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	n.keys = sealtest.NodeKeys(t, filepath.Join(root, name, "keys"), name)
	n.certFile, n.keyFile = c.nodeCert(t, filepath.Join(root, name, "keys"), name)
	return n
}

// serve serves n's node API on a loopback TLS listener as serve does
// (api.TLSConfig with the client CA, api.Bearer), with a Receiver that
// trusts the nodes of trusted.
func (n *node) serve(t *testing.T, trusted ...*node) {
	t.Helper()
	var policy strings.Builder
	policy.WriteString("keys:\n")
	for _, o := range trusted {
		fmt.Fprintf(&policy, "- keyID: %s\n  node: %s\n", seal.KeyID(o.keys.Public), o.name)
	}
	p, err := seal.ParsePolicy([]byte(policy.String()))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := seal.LoadIdentities([]string{n.keys.IdentityFile})
	if err != nil {
		t.Fatal(err)
	}
	n.recv, err = NewReceiver(ReceiverOptions{Dir: n.dir, Open: seal.OpenOptions{Policy: p, Identities: ids},
		MaxBytes: n.maxBytes, MinFreeBytes: n.minFree, Logger: slog.New(slog.NewTextHandler(&n.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := api.TLSConfig(n.certFile, n.keyFile, n.caFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.srv = &http.Server{Handler: api.NewHandler(status.New(nil), api.Options{Auth: api.Bearer(n.servedWithBearer), Transfer: n.recv,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}), ErrorLog: nil}
	go n.srv.Serve(ln)
	t.Cleanup(func() { n.srv.Close() })
	n.url = "https://" + ln.Addr().String()
}

// client is an HTTP client presenting certFile/keyFile, trusting caFile.
func client(t *testing.T, certFile, keyFile, caFile string) *http.Client {
	t.Helper()
	cfg, err := ClientTLS(certFile, keyFile, caFile)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// podCheckpoint writes a pod checkpoint of shop/cart into dir: its
// manifest and a container archive of size random bytes.
func podCheckpoint(t *testing.T, dir string, size int) (name string, files map[string][]byte) {
	t.Helper()
	at := time.Date(2026, 11, 28, 4, 0, 0, 0, time.UTC)
	name = pod.Name("shop", "cart", at, 0)
	archive := "checkpoint-cart_shop-app-2026-11-28T04:00:00Z.tar"
	m := pod.Manifest{Kind: pod.Kind, Version: pod.Version, Namespace: "shop", Name: "cart", UID: "uid-1",
		Containers: []pod.Container{{Name: "app", Archive: archive, Size: int64(size)}}, CheckpointedAt: at}
	mb, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, size)
	rand.Read(data)
	files = map[string][]byte{pod.ManifestFile: mb, archive: data}
	if err := os.MkdirAll(filepath.Join(dir, name), 0o700); err != nil {
		t.Fatal(err)
	}
	for f, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return name, files
}

// sealTo returns the seal options of a transfer from signer to recipient.
func sealTo(t *testing.T, signer *node, recipient string) seal.WriteOptions {
	t.Helper()
	key, err := seal.LoadSigningKey(signer.keys.SigningKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	r, err := age.ParseX25519Recipient(recipient)
	if err != nil {
		t.Fatal(err)
	}
	return seal.WriteOptions{Recipients: []age.Recipient{r}, Signer: &seal.Signer{Node: signer.name, Key: key}}
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
	good := newCA(t, root, "cluster-ca")
	a, b, c := newNode(t, root, good, "node-a"), newNode(t, root, good, "node-b"), newNode(t, root, good, "node-c")
	b.servedWithBearer = []byte("a-token")
	b.serve(t, a)
	name, files := podCheckpoint(t, a.dir, 3<<20)
	aClient := client(t, a.certFile, a.keyFile, good.file)
	ctx := context.Background()

	empty := func(t *testing.T) {
		t.Helper()
		testutil.Eventually(t, "the receiver's checkpoint directory empty", func() error {
			if e := entries(t, b.dir); len(e) > 0 {
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
			rogue := newCA(t, root, "rogue-ca")
			cf, kf := rogue.nodeCert(t, root, "node-a")
			// Go's client offers no certificate that the server's CAs did
			// not issue: the API answers 401.
			_, err := Send(ctx, a.dir, name, SendOptions{Client: client(t, cf, kf, good.file), URL: b.url, Seal: sealTo(t, a, b.keys.Recipient)})
			refused(t, err, http.StatusUnauthorized, "unauthorized")
			// Forced on the server, it fails the handshake.
			forced := client(t, cf, kf, good.file)
			cfg := forced.Transport.(*http.Transport).TLSClientConfig
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cfg.Certificates[0], nil }
			_, err = Send(ctx, a.dir, name, SendOptions{Client: forced, URL: b.url, Seal: sealTo(t, a, b.keys.Recipient)})
			// TLS 1.3: the server verifies the client's certificate after
			// the client's handshake ends, and closes the connection.
			if err == nil || errors.As(err, new(*RefusedError)) {
				t.Fatalf("send with a rogue certificate forced: %v, want the connection refused", err)
			}
			empty(t)
		})
		t.Run("signed as another node than the certificate's", func(t *testing.T) {
			_, err := Send(ctx, a.dir, name, SendOptions{Client: client(t, c.certFile, c.keyFile, good.file), URL: b.url, Seal: sealTo(t, a, b.keys.Recipient)})
			refused(t, err, http.StatusForbidden, `signed as node "node-a", sent by node "node-c"`)
		})
		t.Run("signer not trusted", func(t *testing.T) {
			podCheckpoint(t, c.dir, 1<<10)
			_, err := Send(ctx, c.dir, name, SendOptions{Client: client(t, c.certFile, c.keyFile, good.file), URL: b.url, Seal: sealTo(t, c, b.keys.Recipient)})
			refused(t, err, http.StatusForbidden, "refused by the trust policy")
		})
		t.Run("encrypted to another node", func(t *testing.T) {
			_, err := Send(ctx, a.dir, name, SendOptions{Client: aClient, URL: b.url, Seal: sealTo(t, a, c.keys.Recipient)})
			refused(t, err, http.StatusForbidden, "none of the 1 configured age identities")
		})
		t.Run("tampered bytes", func(t *testing.T) {
			_, err := Send(ctx, a.dir, name, SendOptions{Client: aClient, URL: b.url, Seal: sealTo(t, a, b.keys.Recipient),
				wrap: func(r io.Reader) io.Reader { return &flip{r: r, at: 100 << 10} }})
			refused(t, err, http.StatusForbidden, "digest mismatch")
		})
		t.Run("cut mid-way", func(t *testing.T) {
			_, err := Send(ctx, a.dir, name, SendOptions{Client: aClient, URL: b.url, Seal: sealTo(t, a, b.keys.Recipient),
				wrap: func(r io.Reader) io.Reader { return &cut{r: r, after: 1 << 20} }})
			if err == nil {
				t.Fatal("a cut transfer was stored")
			}
			empty(t)
		})
		t.Run("manifest of another pod", func(t *testing.T) {
			other := filepath.Join(root, "other")
			n, _ := podCheckpoint(t, other, 1<<10)
			m, err := pod.ReadManifest(filepath.Join(other, n))
			if err != nil {
				t.Fatal(err)
			}
			m.Name = "web"
			mb, _ := json.Marshal(m)
			if err := os.WriteFile(filepath.Join(other, n, pod.ManifestFile), mb, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err = Send(ctx, other, n, SendOptions{Client: aClient, URL: b.url, Seal: sealTo(t, a, b.keys.Recipient)})
			refused(t, err, http.StatusBadRequest, "the manifest is of pod shop/web")
		})
		t.Run("bearer token, no certificate", func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPut, b.url+Path(name), strings.NewReader("x"))
			req.Header.Set("Authorization", "Bearer a-token")
			pool := x509.NewCertPool()
			pool.AddCert(good.cert)
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
			req, _ := http.NewRequest(http.MethodPut, b.url+Path("..%2Fetc"), strings.NewReader("x"))
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
		sent, err := Send(ctx, a.dir, name, SendOptions{Client: aClient, URL: b.url, Seal: sealTo(t, a, b.keys.Recipient)})
		if err != nil {
			t.Fatalf("send: %v\nreceiver: %s", err, b.logs.String())
		}
		if sent.Name != name || sent.From != "node-a" || sent.Path != filepath.Join(b.dir, name) || sent.Stored != sent.Plain || sent.Sealed != sent.Received {
			t.Errorf("sent %+v", sent)
		}
		if e := entries(t, b.dir); len(e) != 1 || e[0] != name {
			t.Fatalf("receiver's checkpoint directory: %v, want only %s", e, name)
		}
		for f, want := range files {
			got, err := os.ReadFile(filepath.Join(b.dir, name, f))
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s: %d bytes (%v), want the %d sent", f, len(got), err, len(want))
			}
			fi, err := os.Stat(filepath.Join(b.dir, name, f))
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("%s mode %v (%v), want 0600", f, fi.Mode(), err)
			}
		}
		t.Logf("%d bytes sealed and sent in %v", sent.Sealed, sent.Duration)

		_, err = Send(ctx, a.dir, name, SendOptions{Client: aClient, URL: b.url, Seal: sealTo(t, a, b.keys.Recipient)})
		var re *RefusedError
		if !errors.As(err, &re) || re.Code != http.StatusConflict {
			t.Fatalf("second send of %s: %v, want 409", name, err)
		}
		if e := entries(t, b.dir); len(e) != 1 {
			t.Fatalf("after the refused second send: %v", e)
		}
	})

	t.Run("bounds", func(t *testing.T) {
		small := newNode(t, root, good, "node-small")
		small.maxBytes = 1 << 20
		small.serve(t, a)
		_, err := Send(ctx, a.dir, name, SendOptions{Client: aClient, URL: small.url, Seal: sealTo(t, a, small.keys.Recipient)})
		var re *RefusedError
		if !errors.As(err, &re) || re.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("send over the bound: %v, want 413", err)
		}
		// Without a declared size the bytes themselves are bounded.
		req, _ := http.NewRequest(http.MethodPut, small.url+Path(name), io.LimitReader(rand.Reader, 2<<20))
		req.ContentLength = -1
		resp, err := aClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("undeclared stream over the bound answered %d, want 413", resp.StatusCode)
			}
		}
		if e := entries(t, small.dir); len(e) > 0 {
			t.Fatalf("left behind: %v", e)
		}

		full := newNode(t, root, good, "node-full")
		full.minFree = 1 << 62
		full.serve(t, a)
		_, err = Send(ctx, a.dir, name, SendOptions{Client: aClient, URL: full.url, Seal: sealTo(t, a, full.keys.Recipient)})
		if !errors.As(err, &re) || re.Code != http.StatusInsufficientStorage {
			t.Fatalf("send to a full disk: %v, want 507", err)
		}
		if e := entries(t, full.dir); len(e) > 0 {
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
