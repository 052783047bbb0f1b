// Package migrationtest runs nodeshim on two nodes of one real cluster on
// this machine, for the tests and benchmarks that move pods between them:
// this machine's node (testenv/clustertest's Cluster) and a second node in
// its own network namespace with its own containerd 2.x and kubelet
// (clustertest's Node). Each node runs nodeshim as it ships: `nodeshim
// serve` (the second node's in its namespace), with its own checkpoint
// directory, certificate from one cluster CA, age identity and signing
// key; `nodeshim reporter --pod-checkpoints --pod-migrations` as the
// reporters' ServiceAccount; and the restoring RuntimeClass's binaries as
// its containerd's nodeshim handler, configured to restore only from its
// checkpoint directory, what its trust policy trusts, decrypted with its
// own identity. One `nodeshim controller --pod-migrations` runs as the
// controller's ServiceAccount. deploy/'s CRDs, RBAC and RuntimeClass are
// applied as an operator would.
//
// The source (this machine's node) signs and sends, encrypting only to
// the target's key; the target receives from, and restores what is signed
// by, the source's key only.
package migrationtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeshim/nodeshim/cluster/apis/v1alpha1"
	"github.com/nodeshim/nodeshim/cluster/kubeapi"
	"github.com/nodeshim/nodeshim/cluster/reporter"
	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/deploy"
	"github.com/nodeshim/nodeshim/runtimes/restoring"
	"github.com/nodeshim/nodeshim/shim/api"
	"github.com/nodeshim/nodeshim/shim/checkpoint/retention"
	"github.com/nodeshim/nodeshim/shim/transfer/transfertest"
	"github.com/nodeshim/nodeshim/testenv/clustertest"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testproc"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// Handler is the containerd runtime handler and RuntimeClass name.
const Handler = "nodeshim"

// TargetName is the second node's name.
const TargetName = "node-b"

// Build builds nodeshim and the restoring RuntimeClass's binaries into
// dir, for a TestMain.
func Build(dir string) error {
	for _, b := range append([]string{"nodeshim"}, restoring.Binaries[:]...) {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, b), "github.com/nodeshim/nodeshim/cmd/"+b).CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", b, err, out)
		}
	}
	return nil
}

// Node is one node's nodeshim.
type Node struct {
	*transfertest.Node
	// Root is its serve's --root-dir; HandlerBin its restoring handler,
	// with its configuration beside it.
	Root, HandlerBin string
	// IP is where its serve listens for transfers: the Node's InternalIP.
	IP string
	// NetNS, when set, is the network namespace its serve runs in.
	NetNS string
	// TrustPolicy is its trust policy file: the keys it takes transfers
	// and restores from.
	TrustPolicy string
	// Runtime is its containerd.
	Runtime *runtimetest.Containerd
	// Serve and Reporter are its processes.
	Serve, Reporter *testproc.Proc

	bins       string
	checkpoint string // its configuration's checkpoint section, after enabled and dir
	// defaultCheckpoint is the section Start gave it, once RestartServe
	// has changed it.
	defaultCheckpoint string
	// cleanup is the Cleanup of Start's test: a serve restarted in a
	// subtest outlives it.
	cleanup func(func())
}

// Socket is the node API socket of n's serve.
func (n *Node) Socket() string { return filepath.Join(n.Root, api.SocketName) }

// Pair is a cluster of two nodes with nodeshim on both.
type Pair struct {
	// Cluster is the control plane and this machine's node.
	Cluster *clustertest.Cluster
	// TargetNode is the second node, in its own network namespace.
	TargetNode *clustertest.Node
	// Source is this machine's node's nodeshim, Target the second's.
	Source, Target *Node
	// Clients and Admin are the cluster admin's clients.
	Clients kubernetes.Interface
	Admin   *kubeapi.Client
	// Controller is `nodeshim controller --pod-migrations`.
	Controller *testproc.Proc
	// Dir holds the nodes' keys, configurations and logs.
	Dir string
}

// Start starts a cluster with both nodes and nodeshim on each, the
// binaries from bins (Build), and waits until the target is labelled a
// capable target that receives transfers. The test's end stops it all
// and fails the test on anything that had to be cleaned up by force.
func Start(t testing.TB, bins string) *Pair {
	t.Helper()
	criutest.Require(t)
	p := &Pair{Dir: t.TempDir()}
	// Registered after the directory's removal, so run before it: the
	// runtimes run the handlers from there until they stop.
	env := &clustertest.Env{}
	t.Cleanup(func() {
		if err := env.Close(); err != nil {
			t.Error(err)
		}
	})
	ca := transfertest.NewCA(t, p.Dir, "cluster-ca")
	// This machine's node is named after its host name.
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	srcBin, dstBin := installHandler(t, p.Dir, bins, strings.ToLower(host)), installHandler(t, p.Dir, bins, TargetName)
	env.Containerd2, env.Handlers2 = true, handlers(srcBin)
	p.Cluster = env.Cluster(t)
	p.TargetNode = env.Node(t, clustertest.NodeOptions{Name: TargetName, Handlers2: handlers(dstBin)})
	c := p.Cluster
	// The source listens on this machine's end of the second node's
	// veth pair, which the second node reaches: a lazy migration's
	// target fetches the memory from the source's page servers there.
	p.Source = newNode(t, p.Dir, ca, c.NodeName, p.TargetNode.HostIP, srcBin, bins)
	p.Source.Runtime = c.Containerd
	p.Target = newNode(t, p.Dir, ca, TargetName, p.TargetNode.IP, dstBin, bins)
	p.Target.NetNS, p.Target.Runtime = p.TargetNode.NetNS, p.TargetNode.Containerd
	if p.Clients, err = kubernetes.NewForConfig(c.API.AdminConfig()); err != nil {
		t.Fatal(err)
	}
	if p.Admin, err = kubeapi.ForConfig(c.API.AdminConfig()); err != nil {
		t.Fatal(err)
	}
	for _, m := range []func() ([]byte, error){deploy.PodCheckpointDefinition, deploy.ReporterAccess, deploy.ControllerAccess} {
		y, err := m()
		if err != nil {
			t.Fatal(err)
		}
		c.API.MustApply(t, y)
	}
	for _, f := range []string{"crd-podmigration.yaml", "rbac-podmigration.yaml"} {
		y, err := deploy.Manifests.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c.API.MustApply(t, y)
	}
	// The RuntimeClass component's own manifest, as kustomize applies it.
	_, self, _, _ := runtime.Caller(0)
	y, err := os.ReadFile(filepath.Join(filepath.Dir(self), "../../deploy/runtimeclass/runtimeclass.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c.API.MustApply(t, y)

	p.Source.TrustPolicy = p.Source.trusting(t, p.Target)
	policy := p.Target.trusting(t, p.Source)
	p.Target.TrustPolicy = policy
	p.Source.checkpoint = "  signing:\n    keyFile: " + p.Source.Keys.SigningKeyFile + "\n    nodeName: " + p.Source.Name + "\n" +
		"  encryption:\n    recipients: [" + p.Target.Keys.Recipient + "]\n  transfer:\n    send: true\n"
	p.Target.checkpoint = "  trustPolicy: " + policy + "\n  encryption:\n    identities: [" + p.Target.Keys.IdentityFile + "]\n" +
		"  transfer:\n    enabled: true\n"
	for _, n := range []*Node{p.Source, p.Target} {
		n.StartServe(t)
		n.StartReporter(t, c)
	}
	kc := c.API.Kubeconfig(t, "controller", c.API.ServiceAccountConfig(t, "nodeshim-controller", "nodeshim-controller"))
	p.Controller, err = testproc.Start(p.Dir, "controller", filepath.Join(bins, "nodeshim"), "controller", "--kubeconfig", kc,
		"--namespace", "nodeshim-controller", "--reporter-namespace", "nodeshim", "--metrics-addr", "127.0.0.1:0", "--pod-migrations")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Controller.Stop)
	testutil.Eventually(t, TargetName+" labelled a capable target that receives transfers", func() error {
		n, err := p.Clients.CoreV1().Nodes().Get(context.Background(), TargetName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, l := range []string{v1alpha1.LabelCRIU, v1alpha1.LabelRestoreRuntimeClass} {
			if n.Labels[l] != v1alpha1.LabelTrue {
				return fmt.Errorf("%s=%q; labels %v", l, n.Labels[l], n.Labels)
			}
		}
		if n.Labels[v1alpha1.LabelTransferPort] == "" {
			return fmt.Errorf("no %s; labels %v", v1alpha1.LabelTransferPort, n.Labels)
		}
		return nil
	})
	return p
}

func handlers(bin string) []runtimetest.Handler {
	return []runtimetest.Handler{{Name: Handler, Binary: bin, PodAnnotations: []string{"restore.nodeshim.io/*"}}}
}

// installHandler copies the restoring RuntimeClass's binaries from bins
// into node name's own directory under root (each node's handler reads
// its configuration beside its binary) and returns the handler's path.
func installHandler(t testing.TB, root, bins, name string) string {
	t.Helper()
	dir := filepath.Join(root, name, "bin")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, b := range restoring.Binaries {
		data, err := os.ReadFile(filepath.Join(bins, b))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, b), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "nodeshim-runc")
}

// newNode makes node name's directories, keys and certificate (for ip)
// under root.
func newNode(t testing.TB, root string, ca *transfertest.CA, name, ip, handlerBin, bins string) *Node {
	t.Helper()
	n := &Node{Node: transfertest.NewNode(t, root, ca, name, net.ParseIP(ip)), Root: filepath.Join(root, name, "serve"),
		IP: ip, HandlerBin: handlerBin, bins: bins, cleanup: t.Cleanup}
	if err := os.MkdirAll(n.Root, 0o700); err != nil {
		t.Fatal(err)
	}
	return n
}

// trusting writes n's trust policy, which trusts the signing keys of
// from for their nodes, and the configuration of n's restoring handler,
// which uses it; it returns the policy's path.
func (n *Node) trusting(t testing.TB, from ...*Node) string {
	t.Helper()
	var policy strings.Builder
	policy.WriteString("keys:\n")
	for _, o := range from {
		fmt.Fprintf(&policy, "- keyID: %s\n  node: %s\n", seal.KeyID(o.Keys.Public), o.Name)
	}
	path := filepath.Join(filepath.Dir(n.Root), "trust.yaml")
	if err := os.WriteFile(path, []byte(policy.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	runc, err := exec.LookPath(runtimetest.RuntimeRunc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := restoring.Config{Runtime: runc, CheckpointDir: n.Dir, WorkDir: filepath.Join(filepath.Dir(n.Root), "work"),
		Criu: os.Getenv("NODESHIM_CRIU"), TrustPolicy: path, Identities: []string{n.Keys.IdentityFile},
		ReportCache: filepath.Join(n.Root, "report-cache"),
		// Its node certificate fetches lazy checkpoints' memory.
		LazyTLS: &restoring.LazyTLS{CACert: n.CAFile, Cert: n.CertFile, Key: n.KeyFile}}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(restoring.ConfigPath(n.HandlerBin), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// RestartServe stops n's serve (SIGTERM; a killed one is left as it is)
// and starts it again with checkpoint as its configuration's checkpoint
// section, or the one Start gave it when checkpoint is empty.
func (n *Node) RestartServe(t testing.TB, checkpoint string) {
	t.Helper()
	n.Serve.Stop()
	if n.defaultCheckpoint == "" {
		n.defaultCheckpoint = n.checkpoint
	}
	n.checkpoint = n.defaultCheckpoint
	if checkpoint != "" {
		n.checkpoint = checkpoint
	}
	n.StartServe(t)
}

// StartServe starts n's `nodeshim serve` (in its network namespace when
// it has one) and waits until its node socket answers; the end of the
// test that started the Pair stops it.
func (n *Node) StartServe(t testing.TB) {
	t.Helper()
	src := filepath.Join(filepath.Dir(n.Root), "config")
	if err := os.MkdirAll(src, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := "apiVersion: nodeshim.io/v1alpha1\nkind: ShimConfiguration\n" +
		"containerRuntimeEndpoint: unix://" + n.Runtime.Address + "\n" +
		"api:\n  tcpAddress: " + net.JoinHostPort(n.IP, "0") + "\n  tlsCertFile: " + n.CertFile + "\n  tlsKeyFile: " + n.KeyFile + "\n  clientCAFile: " + n.CAFile + "\n" +
		"checkpoint:\n  enabled: true\n  dir: " + n.Dir + "\n" + n.checkpoint
	if err := os.WriteFile(filepath.Join(src, "config.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"serve", "--root-dir", n.Root, "--lock-file", filepath.Join(n.Root, "nodeshim.lock"), "--config-source", src}
	bin := filepath.Join(n.bins, "nodeshim")
	if n.NetNS != "" {
		args = append([]string{"--net=" + n.NetNS, "--", bin}, args...)
		bin = testutil.RequireBinary(t, "nsenter")
	}
	p, err := testproc.Start(filepath.Dir(n.Root), "serve", bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	n.Serve = p
	n.cleanup(p.Stop)
	c := reporter.NewSocketClient(n.Socket())
	defer c.Close()
	if err := p.WaitReady(func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := c.TransferInfo(ctx)
		return err == nil
	}); err != nil {
		t.Fatalf("serve of %s: %v", n.Name, err)
	}
}

// TransferPort is the port n's serve receives transfers on, as it says
// (GET /transfers).
func (n *Node) TransferPort(t testing.TB) int {
	t.Helper()
	c := reporter.NewSocketClient(n.Socket())
	defer c.Close()
	in, err := c.TransferInfo(context.Background())
	if err != nil || in == nil {
		t.Fatalf("transfer info of %s: %+v, %v", n.Name, in, err)
	}
	return in.Port
}

// StartReporter starts n's `nodeshim reporter` as the reporters'
// ServiceAccount, serving PodCheckpoints and sending PodMigrations; the
// end of the test that started the Pair stops it.
func (n *Node) StartReporter(t testing.TB, c *clustertest.Cluster) {
	t.Helper()
	kc := c.API.Kubeconfig(t, "reporter-"+n.Name, c.API.ServiceAccountConfig(t, "nodeshim", "nodeshim-reporter"))
	p, err := testproc.Start(filepath.Dir(n.Root), "reporter", filepath.Join(n.bins, "nodeshim"), "reporter",
		"--kubeconfig", kc, "--node-name", n.Name, "--namespace", "nodeshim", "--socket", n.Socket(),
		"--metrics-addr", "127.0.0.1:0", "--pod-checkpoints", "--pod-migrations", "--poll-interval", "1s")
	if err != nil {
		t.Fatal(err)
	}
	n.Reporter = p
	n.cleanup(p.Stop)
}

// Logs returns the ends of the logs of n's serve and reporter, for a
// failing test.
func (n *Node) Logs() string {
	return fmt.Sprintf("serve of %s:\n%s\nreporter of %s:\n%s", n.Name, testproc.Tail(n.Serve.Log, 30), n.Name, testproc.Tail(n.Reporter.Log, 30))
}

// Checkpoints lists the entries of n's checkpoint directory, but the
// shim's own trash directory while it is empty (the shim moves what it
// removes there first).
func (n *Node) Checkpoints(t testing.TB) []string {
	t.Helper()
	entries, err := os.ReadDir(n.Dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.Name() == retention.TrashDir {
			if in, err := os.ReadDir(filepath.Join(n.Dir, retention.TrashDir)); err == nil && len(in) == 0 {
				continue
			}
		}
		names = append(names, e.Name())
	}
	return names
}

// DeleteMigration deletes the PodMigration default/name and waits until
// it is gone, with its PodCheckpoint (when it made one) and every pod
// checkpoint on both nodes.
func (p *Pair) DeleteMigration(t testing.TB, name string) {
	t.Helper()
	ctx := context.Background()
	m, err := p.Admin.GetPodMigration(ctx, "default", name)
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Admin.DeletePodMigration(ctx, "default", name); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	testutil.Eventually(t, "PodMigration "+name+", its PodCheckpoint and the pod checkpoints on both nodes gone", func() error {
		if _, err := p.Admin.GetPodMigration(ctx, "default", name); !apierrors.IsNotFound(err) {
			return fmt.Errorf("PodMigration: %v", err)
		}
		if pc := m.Status.PodCheckpoint; pc != "" {
			if _, err := p.Admin.GetPodCheckpoint(ctx, "default", pc); !apierrors.IsNotFound(err) {
				return fmt.Errorf("PodCheckpoint %s: %v", pc, err)
			}
		}
		for _, n := range []*Node{p.Source, p.Target} {
			if got := n.Checkpoints(t); len(got) > 0 {
				return fmt.Errorf("node %s keeps %v", n.Name, got)
			}
		}
		return nil
	})
}

// Containers are the two containers of CounterPod.
var Containers = []string{"counter", "sidecar"}

// counterScript writes a token of its own into /token once, then counts
// in /count ten times a second: a restored container keeps the token, a
// fresh start makes a new one.
const counterScript = "head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \\n' > /token; " +
	"i=0; while true; do i=$((i+1)); echo $i > /count.new; mv /count.new /count; sleep 0.1; done"

// CounterPod is a Pod of default with two containers counting, bound to
// node.
func CounterPod(name, node string) *corev1.Pod {
	var grace int64
	ctr := func(name string) corev1.Container {
		return corev1.Container{Name: name, Image: runtimetest.BusyboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sh", "-c", counterScript}}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{ctr(Containers[0]), ctr(Containers[1])}},
	}
}

// RunPod creates pod and waits until it is Running; the test's end
// deletes it.
func (p *Pair) RunPod(t testing.TB, pod *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	if _, err := p.Clients.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { clustertest.DeletePod(t, p.Clients, pod.Name) })
	testutil.Eventually(t, "pod "+pod.Name+" Running", func() error {
		got, err := p.Clients.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		switch got.Status.Phase {
		case corev1.PodRunning:
			return nil
		case corev1.PodFailed, corev1.PodSucceeded:
			t.Fatalf("Pod %s is %s: %+v", pod.Name, got.Status.Phase, got.Status.ContainerStatuses)
		}
		return fmt.Errorf("phase %s", got.Status.Phase)
	})
}
