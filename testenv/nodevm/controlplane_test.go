package nodevm

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeshim/nodeshim/testenv/kubetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestControlPlaneAdmitsTheNode: the control plane the harness starts for
// the node serves a certificate that names APIServerAddress; the node's
// kubeconfig (as the node gets it, pointed back at the host's loopback)
// authenticates kubelet as system:node:<name> in system:nodes, which the
// Node authorizer lets register its own Node and not read Secrets; and the
// controller manager makes a namespace's default ServiceAccount.
func TestControlPlaneAdmitsTheNode(t *testing.T) {
	apiserver, etcd := kubetest.Binaries(t)
	cm := testutil.RequireTool(t, "NODESHIM_KUBE_CONTROLLER_MANAGER", "kube-controller-manager")
	cp, err := StartControlPlane(t.TempDir(), ControlPlaneBinaries{APIServer: apiserver, Etcd: etcd, ControllerManager: cm})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(cp.Logs())
		}
		cp.Stop()
	})

	block, _ := pem.Decode(cp.Kube.CA)
	if block == nil {
		t.Fatalf("CA is not PEM: %.100q", cp.Kube.CA)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.VerifyHostname(APIServerAddress); err != nil {
		t.Errorf("the serving certificate does not name the node's address of the API server: %v (IPs %v)", err, cert.IPAddresses)
	}

	// The node's kubeconfig, with its server swapped for the host's port.
	kc, err := clientcmd.Load([]byte(Kubeconfig(NodeUser, cp.Kube.NodeToken, cp.Kube.CA)))
	if err != nil {
		t.Fatalf("the node's kubeconfig: %v", err)
	}
	for _, c := range kc.Clusters {
		if want := "https://" + net.JoinHostPort(APIServerAddress, "6443"); c.Server != want {
			t.Errorf("kubeconfig server %q, want %q", c.Server, want)
		}
		c.Server = cp.API.Host()
		c.TLSServerName = APIServerAddress
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*kc, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	node := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	review, err := node.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u := review.Status.UserInfo; u.Username != NodeUser || !contains(u.Groups, "system:nodes") {
		t.Errorf("the node's token is %q in %v; want %s in system:nodes", u.Username, u.Groups, NodeUser)
	}
	if _, err := node.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: Hostname}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("the node cannot register itself: %v", err)
	}
	if _, err := node.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); err == nil {
		t.Errorf("the node may list kube-system's Secrets: the Node authorizer should refuse")
	}

	admin := kubernetes.NewForConfigOrDie(rest.CopyConfig(cp.API.AdminConfig()))
	if cp.Kube.AdminToken != cp.API.AdminConfig().BearerToken {
		t.Errorf("the node's admin token is not the API server's admin token")
	}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "made-here"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the controller manager's default ServiceAccount", func() error {
		_, err := admin.CoreV1().ServiceAccounts("made-here").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	if err := cp.Err(); err != nil {
		t.Error(err)
	}
}

func TestStartControlPlaneNamesAMissingBinary(t *testing.T) {
	missing := t.TempDir() + "/kube-apiserver"
	_, err := StartControlPlane(t.TempDir(), ControlPlaneBinaries{APIServer: missing, Etcd: "/bin/true", ControllerManager: "/bin/true"})
	if err == nil || !strings.Contains(err.Error(), missing) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("StartControlPlane with no kube-apiserver: %v; want its path and ErrNotExist", err)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestKubeFiles: the node's kubelet files say what the node runs with, and
// its network reaches nothing but the API server.
func TestKubeFiles(t *testing.T) {
	files := KubeFiles(Kube{NodeToken: "nodetok", AdminToken: "admintok", CA: []byte("-----BEGIN CERTIFICATE-----\n")})
	byPath := map[string]File{}
	for _, f := range files {
		byPath[f.Path] = f
	}
	for path, wants := range map[string][]string{
		KubeletConfig:                              {"cgroupDriver: systemd", "containerRuntimeEndpoint: unix://" + ContainerdSocket, "failSwapOn: false"},
		KubeletKubeconfig:                          {"token: nodetok", "user: " + NodeUser, "server: https://10.0.2.100:6443"},
		AdminKubeconfig:                            {"token: admintok"},
		"/etc/systemd/system/kubelet.service":      {"--node-ip=" + NodeIP, "--config=" + KubeletConfig, "--kubeconfig=" + KubeletKubeconfig},
		"/etc/systemd/system/node-network.service": {"ip addr add 10.0.2.15/24 dev eth0", "$$((i+1))"},
	} {
		for _, w := range wants {
			if !strings.Contains(byPath[path].Data, w) {
				t.Errorf("%s lacks %q", path, w)
			}
		}
	}
	if !strings.Contains(NodeshimConfigYAML, fmt.Sprintf("readOnlyUIDs: [%d]", ReporterUID)) {
		t.Errorf("nodeshim serve's configuration does not let the reporter's uid %d read its API", ReporterUID)
	}
	if strings.Contains(KubeletConfigYAML, "failCgroupV1") {
		t.Errorf("kubelet's config sets failCgroupV1: the node keeps kubelet's default")
	}
	if _, enabled := byPath["/etc/systemd/system/multi-user.target.wants/"+KubeletUnitName]; enabled {
		t.Errorf("kubelet is enabled at boot: it would kill the CRI scenarios' pods")
	}
	for _, f := range files {
		if (f.Path == KubeletKubeconfig || f.Path == AdminKubeconfig) && f.Mode != 0o600 {
			t.Errorf("%s mode %v, want 0600: it holds a token", f.Path, f.Mode)
		}
	}
	args := strings.Join(NetArgs("/bin/busybox", 40123), " ")
	for _, w := range []string{"restrict=on", "guestfwd=tcp:10.0.2.100:6443-cmd:/bin/busybox nc 127.0.0.1 40123"} {
		if !strings.Contains(args, w) {
			t.Errorf("QEMU's network %q lacks %q", args, w)
		}
	}
	if strings.Contains(args, "hostfwd") {
		t.Errorf("QEMU's network %q forwards a host port into the node", args)
	}
}
