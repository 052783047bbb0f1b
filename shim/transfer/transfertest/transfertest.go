// Package transfertest makes what the tests of shim-to-shim transfers
// share: a cluster CA and nodes' certificates made in the test, each
// node's checkpoint directory and seal keys, its node API served on a
// loopback TLS listener as serve serves it, and a pod checkpoint to send.
package transfertest

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
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
	"github.com/nodeshim/nodeshim/testenv/certtest"
)

// CA is a certificate authority made in the test (certtest.CA).
type CA = certtest.CA

// NewCA makes a CA named name, its certificate written into dir
// (certtest.NewCA).
func NewCA(t testing.TB, dir, name string) *CA { return certtest.NewCA(t, dir, name) }

// Node is one node's shim as a transfer sees it.
type Node struct {
	Name string
	// Dir is its checkpoint directory.
	Dir string
	// Keys are its age identity, signing key and own trust policy.
	Keys sealtest.Keys
	// CertFile and KeyFile are its certificate, issued by the CA of
	// CAFile.
	CertFile, KeyFile, CAFile string
	// URL is its node API's base, once served.
	URL string
}

// NewNode makes node name under root: its checkpoint directory, its seal
// keys and its certificate from ca, for 127.0.0.1 and ips.
func NewNode(t testing.TB, root string, ca *CA, name string, ips ...net.IP) *Node {
	t.Helper()
	n := &Node{Name: name, Dir: filepath.Join(root, name, "checkpoints"), CAFile: ca.File}
	if err := os.MkdirAll(n.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	n.Keys = sealtest.NodeKeys(t, filepath.Join(root, name, "keys"), name)
	n.CertFile, n.KeyFile = ca.NodeCert(t, filepath.Join(root, name, "keys"), name, ips...)
	return n
}

// Trusting returns the open options of a receiver on n: a trust policy of
// the keys of trusted, each for its node, and n's identity.
func (n *Node) Trusting(t testing.TB, trusted ...*Node) seal.OpenOptions {
	t.Helper()
	var policy strings.Builder
	policy.WriteString("keys:\n")
	for _, o := range trusted {
		fmt.Fprintf(&policy, "- keyID: %s\n  node: %s\n", seal.KeyID(o.Keys.Public), o.Name)
	}
	p, err := seal.ParsePolicy([]byte(policy.String()))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := seal.LoadIdentities([]string{n.Keys.IdentityFile})
	if err != nil {
		t.Fatal(err)
	}
	return seal.OpenOptions{Policy: p, Identities: ids}
}

// Serve serves n's node API with transfer as its PUT /transfers/{name}
// on a loopback TLS listener as serve does (api.TLSConfig with n's CA as
// the client CA, api.Bearer of token), until the test ends, and sets
// n.URL.
func (n *Node) Serve(t testing.TB, transfer http.Handler, token []byte) {
	t.Helper()
	cfg, err := api.TLSConfig(n.CertFile, n.KeyFile, n.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: api.NewHandler(status.New(nil), api.Options{Auth: api.Bearer(token), Transfer: transfer,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	n.URL = "https://" + ln.Addr().String()
}

// Client returns an HTTP client presenting certFile and keyFile and
// trusting caFile.
func Client(t testing.TB, certFile, keyFile, caFile string) *http.Client {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, RootCAs: pool},
		ExpectContinueTimeout: 10 * time.Second}} // transfer.ExpectContinueTimeout, which this package cannot import
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// Client returns n's client: its own certificate.
func (n *Node) Client(t testing.TB) *http.Client { return Client(t, n.CertFile, n.KeyFile, n.CAFile) }

// SealTo returns the seal options of a transfer from n to recipient (an
// age recipient): encrypted to it, signed as n.
func (n *Node) SealTo(t testing.TB, recipient string) seal.WriteOptions {
	t.Helper()
	key, err := seal.LoadSigningKey(n.Keys.SigningKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	r, err := age.ParseX25519Recipient(recipient)
	if err != nil {
		t.Fatal(err)
	}
	return seal.WriteOptions{Recipients: []age.Recipient{r}, Signer: &seal.Signer{Node: n.Name, Key: key}}
}

// PodCheckpoint writes a pod checkpoint of namespace/podName into dir:
// its manifest (one container, app) and the container's archive of size
// random bytes. It returns its name and files.
func PodCheckpoint(t testing.TB, dir, namespace, podName string, size int) (name string, files map[string][]byte) {
	t.Helper()
	at := time.Date(2026, 11, 28, 4, 0, 0, 0, time.UTC)
	name = pod.Name(namespace, podName, at, 0)
	archive := fmt.Sprintf("checkpoint-%s_%s-app-2026-11-28T04:00:00Z.tar", podName, namespace)
	m := pod.Manifest{Kind: pod.Kind, Version: pod.Version, Namespace: namespace, Name: podName, UID: "uid-1",
		Containers: []pod.Container{{Name: "app", Archive: archive, Size: int64(size)}}, CheckpointedAt: at}
	mb, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
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
