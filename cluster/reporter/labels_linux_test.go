package reporter

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeshim/nodeshim/cluster/apis/v1alpha1"
	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/report"
	"github.com/nodeshim/nodeshim/shim/transfer"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/kubetest"
	nstestutil "github.com/nodeshim/nodeshim/testenv/testutil"
)

// ours returns n's labels under v1alpha1.LabelPrefix.
func ours(n *corev1.Node) map[string]string {
	out := map[string]string{}
	for k, v := range n.Labels {
		if len(k) > len(v1alpha1.LabelPrefix) && k[:len(v1alpha1.LabelPrefix)] == v1alpha1.LabelPrefix {
			out[k] = v
		}
	}
	return out
}

// waitLabels steps the reporter until the Node's own labels are want and
// every foreign label is still as it was.
func (e *env) waitLabels(want, foreign map[string]string) {
	e.t.Helper()
	nstestutil.Eventually(e.t, fmt.Sprintf("node %s labelled %v", e.node, want), func() error {
		e.step(time.Second, time.Second)
		n := e.getNode()
		for k, v := range foreign {
			if n.Labels[k] != v {
				e.t.Fatalf("label %s of another owner changed: %q, want %q", k, n.Labels[k], v)
			}
		}
		if got := ours(n); !maps.Equal(got, want) {
			return fmt.Errorf("labels %v", got)
		}
		return nil
	})
}

// testCapabilityLabels runs the reporter with its ServiceAccount (deploy/'s
// RBAC unchanged: nodes/status patch) against the API server: the Node
// gets the labels of the shim's report, they follow the report, a label
// of the prefix that no longer holds is removed, labels of other owners
// are never touched, and an unreachable shim takes them all away.
func testCapabilityLabels(t *testing.T, c *kubetest.Cluster, sa kubernetes.Interface) {
	e := newEnvWith(t, c, sa, "node-labels", func(o *Options) {
		o.Report = o.Shim.(pollOnly).Shim.(*SocketClient)
	})
	ctx := context.Background()
	n := e.getNode()
	foreign := map[string]string{"team": "a", "checkpoint.example.io/criu": "false", "kubernetes.io/arch": "amd64"}
	n.Labels = maps.Clone(foreign)
	n.Labels[v1alpha1.LabelPrefix+"stale"] = "true"
	if _, err := e.admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	n = e.getNode()
	n.Status.RuntimeHandlers = []corev1.NodeRuntimeHandler{{Name: "runc"}, {Name: DefaultRestoreHandler}}
	if _, err := e.admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	verdicts := map[string]capability.Verdict{
		"criu.check": capability.Supported, "criu.version": capability.Supported, "criu.lazy_pages": capability.Supported,
		"criu.feature.uffd-noncoop": capability.Supported, "criu.feature.mem_dirty_track": capability.Unsupported,
	}
	rep := testReport(verdicts, map[string]string{"criu.version": "criu --version: 4.1.1"})
	rep.GeneratedAt = time.Unix(1800000000, 0)
	e.shim.Model.SetReport(rep, nil)
	e.waitLabels(map[string]string{
		v1alpha1.LabelCRIU: "true", v1alpha1.LabelCRIUVersion: "4.1.1", v1alpha1.LabelLazyPages: "true",
		v1alpha1.LabelPreCopy: "false", v1alpha1.LabelRestoreRuntimeClass: "true", v1alpha1.LabelArch: "amd64",
	}, foreign)
	if w := e.writes(kindLabels); w != 1 {
		t.Errorf("%v label patches, want 1", w)
	}

	// A new report where criu check fails and the dirty tracking is
	// unknown: criu and lazy pages turn false, pre-copy goes. The shim
	// now receives transfers: where and to which key to send is
	// published too.
	verdicts["criu.check"], verdicts["criu.feature.mem_dirty_track"] = capability.Unsupported, capability.Unknown
	rep = testReport(verdicts, map[string]string{"criu.version": "criu --version: 4.1.1"})
	rep.GeneratedAt = time.Unix(1800000060, 0)
	const recipient = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"
	e.shim.SetTransfers(&transfer.Info{Port: 10443, Recipients: []string{recipient}})
	e.shim.Model.SetReport(rep, nil)
	e.waitLabels(map[string]string{
		v1alpha1.LabelCRIU: "false", v1alpha1.LabelCRIUVersion: "4.1.1", v1alpha1.LabelLazyPages: "false",
		v1alpha1.LabelRestoreRuntimeClass: "true", v1alpha1.LabelArch: "amd64",
		v1alpha1.LabelTransferPort: "10443", v1alpha1.LabelTransferRecipient: recipient,
	}, foreign)
	if s := e.reporter.State().Labels; s[v1alpha1.LabelCRIU] != "false" {
		t.Errorf("state labels %v", s)
	}

	// The shim goes away: nothing it said holds any more.
	e.shim.Stop()
	e.waitLabels(map[string]string{}, foreign)
	if f := e.failures(kindLabels); f != 0 {
		t.Errorf("%v failed label patches", f)
	}
}

// testCapabilityLabelsOfThisNode labels a Node from the report this
// machine's own probes make (CRIU run for real): criu works here, on
// this architecture, with its version named.
func testCapabilityLabelsOfThisNode(t *testing.T, c *kubetest.Cluster, sa kubernetes.Interface) {
	nstestutil.RequireRoot(t)
	criutest.RequireChecked(t)
	rep, err := report.Options{Host: *kernel.DefaultHost()}.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, c, sa, "node-labels-live", func(o *Options) {
		o.Report = o.Shim.(pollOnly).Shim.(*SocketClient)
	})
	e.shim.Model.SetReport(rep, nil)
	want := CapabilityLabels(rep, nil, DefaultRestoreHandler)
	if want[v1alpha1.LabelCRIU] != "true" || want[v1alpha1.LabelCRIUVersion] == "" || want[v1alpha1.LabelArch] != runtime.GOARCH {
		t.Fatalf("this node's labels %v: want criu=true, a version and arch %s", want, runtime.GOARCH)
	}
	e.waitLabels(want, nil)
}
