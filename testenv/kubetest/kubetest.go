// Package kubetest runs a real Kubernetes control plane for tests: an etcd
// and a kube-apiserver on free 127.0.0.1 ports, with a static token file
// (an admin token in system:masters) and RBAC authorization, so that a test
// can act as the admin to set things up and as a ServiceAccount to check
// that a component works with exactly the rights it is granted.
//
// The binaries are found through NODESHIM_KUBE_APISERVER and NODESHIM_ETCD
// (`make kube-testenv` builds kube-apiserver from the Go module proxy and
// unpacks Debian trixie's etcd; `make test` exports both), else as
// kube-apiserver and etcd on PATH. A test that cannot find them is skipped
// through testutil, which fails it under NODESHIM_REQUIRE_PRIVILEGED=1.
//
// There is no controller manager: namespaces, ServiceAccounts and RBAC
// objects a test needs are created by the test (ServiceAccountConfig and
// Apply help), and nothing is garbage-collected. testenv/clustertest adds
// the controller manager, the scheduler and a kubelet over StartIn.
package kubetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeshim/nodeshim/testenv/testproc"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// Environment variables naming the binaries (set by mk/reporter.mk).
const (
	EnvAPIServer = "NODESHIM_KUBE_APISERVER"
	EnvEtcd      = "NODESHIM_ETCD"
)

// AdminUser is the user of the admin token, a member of system:masters.
const AdminUser = "nodeshim-test-admin"

// Cluster is a running etcd and kube-apiserver.
type Cluster struct {
	// Dir holds the data, certificates, keys and logs of both processes.
	Dir string

	apiserverBin string
	etcdBin      string
	etcdURL      string
	apiPort      int
	adminToken   string
	opts         Options

	mu        sync.Mutex
	etcd      *testproc.Proc
	apiserver *testproc.Proc
}

func binary(t testing.TB, env, name string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		testutil.RequireFile(t, p)
		return p
	}
	return testutil.RequireBinary(t, name)
}

// Binaries returns the paths of kube-apiserver and etcd, gating t on them.
func Binaries(t testing.TB) (apiserver, etcd string) {
	t.Helper()
	return binary(t, EnvAPIServer, "kube-apiserver"), binary(t, EnvEtcd, "etcd")
}

// Start starts etcd and kube-apiserver, waits until the API server's /readyz
// answers ok, and stops both when t ends. On failure the tails of both logs
// are written to the test log.
func Start(t testing.TB) *Cluster {
	t.Helper()
	apiBin, etcdBin := Binaries(t)
	c := &Cluster{Dir: t.TempDir(), apiserverBin: apiBin, etcdBin: etcdBin}
	t.Cleanup(func() {
		c.stopAll()
		if t.Failed() {
			c.dumpLogs(t)
		}
	})
	if err := c.begin(); err != nil {
		t.Fatal(err)
	}
	return c
}

// StartIn is Start for a cluster that outlives one test (a package's
// TestMain): etcd and kube-apiserver keep their state in dir, and Stop
// stops them. The binaries are gated by the caller (Binaries).
func StartIn(dir, apiserverBin, etcdBin string) (*Cluster, error) {
	c := &Cluster{Dir: dir, apiserverBin: apiserverBin, etcdBin: etcdBin}
	if err := c.begin(); err != nil {
		c.stopAll()
		return nil, err
	}
	return c, nil
}

// Options change the API server that StartWith starts.
type Options struct {
	// AdvertiseAddress is the address the API server advertises besides
	// listening on 127.0.0.1; its self-signed serving certificate names it
	// too, so that a client reaching 127.0.0.1 through a forward (a QEMU
	// guest's user-mode network) verifies it.
	AdvertiseAddress string
	// Tokens are static token users besides the admin.
	Tokens []Token
	// NodeAuthorizer puts the Node authorizer before RBAC, as a cluster
	// with kubelets has it: a kubelet authenticated as system:node:<name>
	// in system:nodes gets exactly what its node needs.
	NodeAuthorizer bool
}

// Token is a static bearer token's user.
type Token struct {
	Token, User string
	Groups      []string
}

// StartWith is StartIn with opts.
func StartWith(dir, apiserverBin, etcdBin string, opts Options) (*Cluster, error) {
	c := &Cluster{Dir: dir, apiserverBin: apiserverBin, etcdBin: etcdBin, opts: opts}
	if err := c.begin(); err != nil {
		c.stopAll()
		return nil, err
	}
	return c, nil
}

// Stop stops kube-apiserver and etcd.
func (c *Cluster) Stop() { c.stopAll() }

// Logs returns the last lines of the logs of etcd and kube-apiserver.
func (c *Cluster) Logs() string {
	var b strings.Builder
	for _, name := range []string{"etcd", "kube-apiserver"} {
		fmt.Fprintf(&b, "last lines of %s.log:\n%s\n", name, testproc.Tail(filepath.Join(c.Dir, name+".log"), 40))
	}
	return b.String()
}

func (c *Cluster) begin() error {
	if err := c.setup(); err != nil {
		return err
	}
	if err := c.startEtcd(); err != nil {
		return err
	}
	return c.startAPIServer()
}

func (c *Cluster) setup() error {
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return fmt.Errorf("admin token: %w", err)
	}
	c.adminToken = hex.EncodeToString(tok)
	// kube-apiserver's token file: token,user,uid,"group,group".
	tokens := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n", c.adminToken, AdminUser, AdminUser)
	for _, tk := range c.opts.Tokens {
		if strings.ContainsAny(tk.Token+tk.User+strings.Join(tk.Groups, ""), ",\"\n") {
			return fmt.Errorf("token of %q: commas, quotes and newlines cannot go into the token file", tk.User)
		}
		tokens += fmt.Sprintf("%s,%s,%s,\"%s\"\n", tk.Token, tk.User, tk.User, strings.Join(tk.Groups, ","))
	}
	if err := os.WriteFile(filepath.Join(c.Dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		return fmt.Errorf("write token file: %w", err)
	}
	// The ServiceAccount token signing key (TokenRequest needs one).
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("service account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("service account key: %w", err)
	}
	priv := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(filepath.Join(c.Dir, "sa.key"), priv, 0o600); err != nil {
		return fmt.Errorf("write service account key: %w", err)
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	if err := os.WriteFile(filepath.Join(c.Dir, "sa.pub"), pubPEM, 0o644); err != nil {
		return fmt.Errorf("write service account key: %w", err)
	}
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	c.etcdURL = "http://127.0.0.1:" + strconv.Itoa(ports[0])
	c.apiPort = ports[2]
	return c.writeEtcdArgs(ports[1])
}

// freePorts returns n distinct ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (c *Cluster) writeEtcdArgs(peerPort int) error {
	peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	args := []string{
		"--name=kubetest",
		"--data-dir=" + filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls=" + c.etcdURL,
		"--advertise-client-urls=" + c.etcdURL,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=kubetest=" + peer,
		// Test data: durability across a machine crash is not needed, and
		// fsync on a shared disk is what makes etcd slow here.
		"--unsafe-no-fsync",
		"--log-level=warn",
	}
	return os.WriteFile(filepath.Join(c.Dir, "etcd.args"), []byte(strings.Join(args, "\n")), 0o600)
}

func (c *Cluster) startEtcd() error {
	b, err := os.ReadFile(filepath.Join(c.Dir, "etcd.args"))
	if err != nil {
		return err
	}
	p, err := testproc.Start(c.Dir, "etcd", c.etcdBin, strings.Split(string(b), "\n")...)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.etcd = p
	c.mu.Unlock()
	// etcd answers /health once it has elected itself.
	return p.WaitReady(func() bool {
		resp, err := http.Get(c.etcdURL + "/health")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(`"health":"true"`))
	})
}

// StartAPIServer starts kube-apiserver on the cluster's port, over the same
// etcd, and waits for /readyz. Start calls it; a test that stopped the API
// server with StopAPIServer calls it again to bring it back.
func (c *Cluster) StartAPIServer(t testing.TB) error {
	t.Helper()
	return c.startAPIServer()
}

func (c *Cluster) startAPIServer() error {
	advertise, authz := "127.0.0.1", "RBAC"
	if c.opts.AdvertiseAddress != "" {
		advertise = c.opts.AdvertiseAddress
	}
	if c.opts.NodeAuthorizer {
		authz = "Node,RBAC"
	}
	var extra []string
	if advertise == "127.0.0.1" {
		// Since 1.37 the endpoint reconciler refuses a loopback address
		// (it would publish it as the kubernetes Service's endpoint);
		// nothing here reaches the API server through that Service.
		extra = append(extra, "--endpoint-reconciler-type=none")
	}
	args := []string{
		"--etcd-servers=" + c.etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=" + advertise,
		"--secure-port=" + strconv.Itoa(c.apiPort),
		"--cert-dir=" + filepath.Join(c.Dir, "certs"),
		"--token-auth-file=" + filepath.Join(c.Dir, "tokens.csv"),
		"--authorization-mode=" + authz,
		"--service-account-key-file=" + filepath.Join(c.Dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(c.Dir, "sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--api-audiences=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.96.0.0/24",
		// Node agents' DaemonSets run privileged containers; without this
		// a server-side dry run of such a manifest is rejected.
		"--allow-privileged=true",
		"--profiling=false",
		"--v=1",
	}
	p, err := testproc.Start(c.Dir, "kube-apiserver", c.apiserverBin, append(args, extra...)...)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.apiserver = p
	c.mu.Unlock()
	return p.WaitReady(func() bool {
		// The serving certificate appears in the cert dir once the API
		// server has made it: build the client on each try.
		if _, err := os.Stat(c.CAFile()); err != nil {
			return false
		}
		cs, err := kubernetes.NewForConfig(c.AdminConfig())
		if err != nil {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && strings.TrimSpace(string(body)) == "ok"
	})
}

// StopAPIServer stops kube-apiserver (SIGTERM, then waits for it to exit)
// and leaves etcd running, so that StartAPIServer brings the same cluster
// state back.
func (c *Cluster) StopAPIServer() {
	c.mu.Lock()
	p := c.apiserver
	c.apiserver = nil
	c.mu.Unlock()
	p.Stop()
}

func (c *Cluster) stopAll() {
	c.mu.Lock()
	api, etcd := c.apiserver, c.etcd
	c.apiserver, c.etcd = nil, nil
	c.mu.Unlock()
	api.Stop()
	etcd.Stop()
}

func (c *Cluster) dumpLogs(t testing.TB) {
	t.Log(c.Logs())
}

// Host is the API server's URL.
func (c *Cluster) Host() string {
	return "https://127.0.0.1:" + strconv.Itoa(c.apiPort)
}

// Port is the API server's port on 127.0.0.1.
func (c *Cluster) Port() int { return c.apiPort }

// CAFile is the API server's self-signed serving certificate (with its CA),
// for clients that verify it.
func (c *Cluster) CAFile() string {
	return filepath.Join(c.Dir, "certs", "apiserver.crt")
}

// config returns a client configuration that authenticates with token.
func (c *Cluster) config(token string) *rest.Config {
	return &rest.Config{
		Host:            c.Host(),
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: c.CAFile()},
		// Tests create objects in bursts; the default 5 QPS throttles them.
		QPS:   100,
		Burst: 200,
	}
}

// AdminConfig returns a client configuration for the admin token
// (system:masters: every right).
func (c *Cluster) AdminConfig() *rest.Config {
	return c.config(c.adminToken)
}

// AdminClient returns a clientset authenticated as the admin.
func (c *Cluster) AdminClient(t testing.TB) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// ServiceAccountConfig returns a client configuration that authenticates as
// the ServiceAccount namespace/name, with a token obtained through the
// TokenRequest API (as the kubelet projects one into a pod). The namespace
// and the ServiceAccount are created when missing; what the account may do
// is up to the RBAC objects the test creates.
func (c *Cluster) ServiceAccountConfig(t testing.TB, namespace, name string) *rest.Config {
	t.Helper()
	ctx := context.Background()
	cs := c.AdminClient(t)
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", namespace, err)
	}
	_, err = cs.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create service account %s/%s: %v", namespace, name, err)
	}
	ttl := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("request a token for %s/%s: %v", namespace, name, err)
	}
	return c.config(tr.Status.Token)
}

// BoundServiceAccountConfig is ServiceAccountConfig for namespace/name
// after a ClusterRole named name with rules is bound to that account:
// what the account may do is what rules grant, for a test that shows each
// grant needed.
func (c *Cluster) BoundServiceAccountConfig(t testing.TB, namespace, name string, rules []rbacv1.PolicyRule) *rest.Config {
	t.Helper()
	ctx := context.Background()
	cs := c.AdminClient(t)
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create cluster role %s: %v", name, err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: namespace}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("bind cluster role %s: %v", name, err)
	}
	return c.ServiceAccountConfig(t, namespace, name)
}

// Kubeconfig writes a kubeconfig file for cfg (host, CA file, bearer token)
// into the cluster's directory and returns its path, for programs under test
// that take --kubeconfig.
func (c *Cluster) Kubeconfig(t testing.TB, name string, cfg *rest.Config) string {
	t.Helper()
	p, err := c.WriteKubeconfig(name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// WriteKubeconfig is Kubeconfig returning its error.
func (c *Cluster) WriteKubeconfig(name string, cfg *rest.Config) (string, error) {
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubetest
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: kubetest
  context:
    cluster: kubetest
    user: %s
current-context: kubetest
`, cfg.Host, c.CAFile(), name, cfg.BearerToken, name)
	p := filepath.Join(c.Dir, name+".kubeconfig")
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		return "", fmt.Errorf("write kubeconfig: %w", err)
	}
	return p, nil
}
