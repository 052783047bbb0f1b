package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/cluster/controller"
	"github.com/nodeshim/nodeshim/deploy"
	"github.com/nodeshim/nodeshim/testenv/kubetest"
)

func TestControllerUsage(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no namespace", []string{"controller"}, "--namespace"},
		{"no grace period", []string{"controller", "--namespace", "x", "--grace-period", "0s"}, "--grace-period"},
		{"negative sync period", []string{"controller", "--namespace", "x", "--sync-period", "-1s"}, "--sync-period"},
		{"an argument", []string{"controller", "--namespace", "x", "extra"}, "unknown command"},
	}
	t.Setenv("POD_NAMESPACE", "")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, tc.args...)
			var ee *exitError
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %s", err, tc.want)
			}
			if tc.name != "an argument" && (!errors.As(err, &ee) || ee.code != exitUsage) {
				t.Fatalf("err = %v, want a usage error (exit %d)", err, exitUsage)
			}
		})
	}
}

func TestIdentity(t *testing.T) {
	if id, err := identity("given"); err != nil || id != "given" {
		t.Errorf("identity(given) = %q, %v", id, err)
	}
	t.Setenv("POD_NAME", "nodeshim-controller-abc")
	a, err := identity("")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := identity("")
	if !strings.HasPrefix(a, "nodeshim-controller-abc_") || a == b {
		t.Errorf("identities %q and %q: want the pod name and a random suffix", a, b)
	}
}

// TestControllerEndToEnd runs `nodeshim controller` as deploy/'s
// ServiceAccount against a real API server: it takes the lead (on the
// binary's own small API client) and releases it when stopped.
func TestControllerEndToEnd(t *testing.T) {
	c := kubetest.Start(t)
	rbac, err := deploy.ControllerAccess()
	if err != nil {
		t.Fatal(err)
	}
	c.MustApply(t, rbac)
	const ns = "nodeshim-controller"
	kubeconfig := c.Kubeconfig(t, "nodeshim-controller", c.ServiceAccountConfig(t, ns, "nodeshim-controller"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"controller", "--kubeconfig", kubeconfig, "--namespace", ns, "--reporter-namespace", "nodeshim",
		"--identity", "e2e", "--metrics-addr", "127.0.0.1:0",
		"--leader-elect-lease-duration", "2s", "--leader-elect-renew-deadline", "1500ms", "--leader-elect-retry-period", "200ms"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	admin := c.AdminClient(t)
	holder := func() string {
		l, err := admin.CoordinationV1().Leases(ns).Get(context.Background(), controller.DefaultElectionName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	// RBAC takes effect through the API server's informers: the
	// controller retries until it may list and take the Lease (go test's
	// -timeout bounds the wait).
	for holder() != "e2e" {
		select {
		case err := <-done:
			t.Fatalf("controller exited before it led: %v\n%s", err, out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("controller: %v\n%s", err, out.String())
	}
	if h := holder(); h != "" {
		t.Errorf("election Lease held by %q after the controller stopped, want released", h)
	}
}
