package nodevm

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodeshim/nodeshim/testenv/kubetest"
	"github.com/nodeshim/nodeshim/testenv/testproc"
)

// ControlPlaneBinaries are the host's Kubernetes programs for the control
// plane the node joins, at the node's kubelet's version (a kubelet newer
// than its API server is outside Kubernetes' version skew policy).
// Scheduler, when set, is kube-scheduler, which binds a DaemonSet's pods to
// their node.
type ControlPlaneBinaries struct {
	APIServer, Etcd, ControllerManager, Scheduler string
}

// ControlPlane is etcd, kube-apiserver and kube-controller-manager on the
// host's loopback, for the node: the API server's serving certificate
// names APIServerAddress, the Node authorizer admits kubelet as NodeUser,
// and the controller manager makes each namespace's default
// ServiceAccount and root CA, and watches the node's lifecycle.
type ControlPlane struct {
	// API is the etcd and kube-apiserver of testenv/kubetest.
	API *kubetest.Cluster
	// Kube is what the node needs of it (Kubelet left for the caller).
	Kube Kube

	cm, sched *testproc.Proc
}

// StartControlPlane starts the node's control plane with its data under
// dir and waits until the API server is ready.
func StartControlPlane(dir string, bins ControlPlaneBinaries) (*ControlPlane, error) {
	for _, p := range []string{bins.APIServer, bins.Etcd, bins.ControllerManager} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("the node's control plane needs %s: %w", p, err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "api"), 0o755); err != nil {
		return nil, fmt.Errorf("the node's control plane: %w", err)
	}
	nodeToken, err := newToken()
	if err != nil {
		return nil, err
	}
	api, err := kubetest.StartWith(filepath.Join(dir, "api"), bins.APIServer, bins.Etcd, kubetest.Options{
		AdvertiseAddress: APIServerAddress,
		Tokens:           []kubetest.Token{{Token: nodeToken, User: NodeUser, Groups: []string{"system:nodes"}}},
		NodeAuthorizer:   true,
	})
	if err != nil {
		return nil, fmt.Errorf("the node's control plane: %w", err)
	}
	cp := &ControlPlane{API: api}
	ca, err := os.ReadFile(api.CAFile())
	if err != nil {
		cp.Stop()
		return nil, fmt.Errorf("the node's control plane: %w", err)
	}
	admin := api.AdminConfig()
	cp.Kube = Kube{HostPort: api.Port(), CA: ca, NodeToken: nodeToken, AdminToken: admin.BearerToken}
	kubeconfig, err := api.WriteKubeconfig("admin", admin)
	if err != nil {
		cp.Stop()
		return nil, fmt.Errorf("the node's control plane: %w", err)
	}
	cp.cm, err = testproc.Start(dir, "kube-controller-manager", bins.ControllerManager,
		"--kubeconfig="+kubeconfig,
		"--root-ca-file="+api.CAFile(),
		"--service-account-private-key-file="+filepath.Join(api.Dir, "sa.key"),
		"--leader-elect=false",
		"--secure-port=0",
		"--v=1")
	if err != nil {
		cp.Stop()
		return nil, fmt.Errorf("the node's control plane: %w", err)
	}
	if bins.Scheduler != "" {
		cp.sched, err = testproc.Start(dir, "kube-scheduler", bins.Scheduler,
			"--kubeconfig="+kubeconfig, "--leader-elect=false", "--secure-port=0", "--v=1")
		if err != nil {
			cp.Stop()
			return nil, fmt.Errorf("the node's control plane: %w", err)
		}
	}
	return cp, nil
}

// Logs returns the last lines of the control plane's logs.
func (cp *ControlPlane) Logs() string {
	return cp.API.Logs() + "last lines of kube-controller-manager.log:\n" +
		testproc.Tail(filepath.Join(filepath.Dir(cp.API.Dir), "kube-controller-manager.log"), 40) + "\n" +
		"last lines of kube-scheduler.log:\n" + testproc.Tail(filepath.Join(filepath.Dir(cp.API.Dir), "kube-scheduler.log"), 20) + "\n"
}

// Stop stops the scheduler, the controller manager, the API server and
// etcd.
func (cp *ControlPlane) Stop() {
	if cp.sched != nil {
		cp.sched.Stop()
	}
	if cp.cm != nil {
		cp.cm.Stop()
	}
	cp.API.Stop()
}

// Err says whether the controller manager or the scheduler exited early.
func (cp *ControlPlane) Err() error {
	var errs []error
	for name, p := range map[string]*testproc.Proc{"kube-controller-manager": cp.cm, "kube-scheduler": cp.sched} {
		if p == nil {
			continue
		}
		select {
		case <-p.Exited():
			errs = append(errs, errors.Join(errors.New(name+" exited"), p.Err()))
		default:
		}
	}
	return errors.Join(errs...)
}

func newToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("node token: %w", err)
	}
	return hex.EncodeToString(b), nil
}
