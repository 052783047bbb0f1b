// Package certtest makes certificates in a test: a CA, and node
// certificates it issues for server and client use, written as PEM files.
// It imports nothing of nodeshim, so that any package's tests may use it.
package certtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made in the test.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// File is its certificate, PEM.
	File string
}

// NewCA makes a CA named name, its certificate written into dir.
func NewCA(t testing.TB, dir, name string) *CA {
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
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	c := &CA{Cert: cert, key: key, File: filepath.Join(dir, name+".crt")}
	writePEM(t, c.File, "CERTIFICATE", der)
	return c
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// NodeCert issues node's certificate (CommonName system:node:NODE, for
// 127.0.0.1 and ips, server and client use) into dir and returns its
// files.
func (c *CA) NodeCert(t testing.TB, dir, node string, ips ...net.IP) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: append([]net.IP{net.IPv4(127, 0, 0, 1)}, ips...)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.Cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(dir, c.Cert.Subject.CommonName+"-"+node)
	writePEM(t, base+".crt", "CERTIFICATE", der)
	writePEM(t, base+".key", "PRIVATE KEY", kder)
	return base + ".crt", base + ".key"
}
