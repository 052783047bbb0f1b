package migrationsend

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/cluster/apis/v1alpha1"
	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/shim/transfer"
)

const rec = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"

func node(labels map[string]string, addrs ...corev1.NodeAddress) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b", Labels: labels}, Status: corev1.NodeStatus{Addresses: addrs}}
}

func TestRequest(t *testing.T) {
	receives := map[string]string{v1alpha1.LabelTransferPort: "10443", v1alpha1.LabelTransferRecipient: rec}
	internal := func(a string) corev1.NodeAddress { return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a} }
	for _, tt := range []struct {
		name string
		n    *corev1.Node
		want transfer.SendRequest
		says string
	}{
		{"ipv4", node(receives, corev1.NodeAddress{Type: corev1.NodeHostName, Address: "b"}, internal("10.0.0.2")),
			transfer.SendRequest{Node: "node-b", URL: "https://10.0.0.2:10443", Recipient: rec}, ""},
		{"ipv6", node(receives, internal("fd00::2")), transfer.SendRequest{Node: "node-b", URL: "https://[fd00::2]:10443", Recipient: rec}, ""},
		{"no labels", node(nil, internal("10.0.0.2")), transfer.SendRequest{}, "node node-b receives no transfers"},
		{"no recipient", node(map[string]string{v1alpha1.LabelTransferPort: "10443"}, internal("10.0.0.2")), transfer.SendRequest{}, "receives no transfers"},
		{"no InternalIP", node(receives, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "192.0.2.1"}), transfer.SendRequest{}, "no InternalIP"},
		{"InternalIP not an address", node(receives, internal("node-b.example")), transfer.SendRequest{}, "no InternalIP"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Request(tt.n)
			if tt.says != "" {
				if err == nil || !strings.Contains(err.Error(), tt.says) {
					t.Fatalf("Request = %+v, %v; want an error saying %q", got, err, tt.says)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Request = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestWaiting(t *testing.T) {
	m := func(phase v1alpha1.MigrationPhase, source string, tr *condition.Condition) *v1alpha1.PodMigration {
		out := &v1alpha1.PodMigration{Status: v1alpha1.PodMigrationStatus{Phase: phase, SourceNode: source, Checkpoint: "checkpoint-x"}}
		if tr != nil {
			out.Status.Conditions = []condition.Condition{*tr}
		}
		return out
	}
	inProgress := &condition.Condition{Type: v1alpha1.ConditionTransferred, Status: condition.False, Reason: v1alpha1.ReasonTransferring}
	for _, tt := range []struct {
		name string
		m    *v1alpha1.PodMigration
		want bool
	}{
		{"waits here", m(v1alpha1.MigrationTransferring, "node-a", inProgress), true},
		{"another node's", m(v1alpha1.MigrationTransferring, "node-c", inProgress), false},
		{"still checkpointing", m(v1alpha1.MigrationCheckpointing, "node-a", nil), false},
		{"sent", m(v1alpha1.MigrationTransferring, "node-a", &condition.Condition{Type: v1alpha1.ConditionTransferred, Status: condition.True, Reason: v1alpha1.ReasonTransferred}), false},
		{"failed", m(v1alpha1.MigrationTransferring, "node-a", &condition.Condition{Type: v1alpha1.ConditionTransferred, Status: condition.False, Reason: v1alpha1.ReasonTransferFailed}), false},
		{"no step yet", m(v1alpha1.MigrationTransferring, "node-a", nil), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Waiting(tt.m, "node-a"); got != tt.want {
				t.Fatalf("Waiting = %v, want %v", got, tt.want)
			}
		})
	}
}

// releaseAPI is the API of TestRelease: one Node that may exist, and the
// PodMigration updates it was asked for.
type releaseAPI struct {
	API
	targetExists bool
	updated      []*v1alpha1.PodMigration
}

func (a *releaseAPI) GetNode(_ context.Context, name string) (*corev1.Node, error) {
	if !a.targetExists {
		return nil, apierrors.NewNotFound(corev1.Resource("nodes"), name)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, nil
}

func (a *releaseAPI) UpdatePodMigration(_ context.Context, m *v1alpha1.PodMigration, _ string) (*v1alpha1.PodMigration, error) {
	a.updated = append(a.updated, m)
	return m, nil
}

// releaseShim records the removals asked of it, failing them with err.
type releaseShim struct {
	Shim
	removed []string
	err     error
}

func (s *releaseShim) RemoveCheckpoint(_ context.Context, name string) error {
	s.removed = append(s.removed, name)
	return s.err
}

// TestRelease: a deleted migration is let go by the node that holds its
// files, the target, once its shim removed them; by the source only when
// the target's Node is gone; never by another node, nor when the removal
// failed. (The whole path runs in e2e/migration between two real nodes.)
func TestRelease(t *testing.T) {
	for _, tt := range []struct {
		name, node   string
		targetExists bool
		shimErr      error
		wantRemoved  bool
		wantReleased bool
		says         string
	}{
		{name: "target removes its copy", node: "node-b", targetExists: true, wantRemoved: true, wantReleased: true},
		{name: "target's removal fails", node: "node-b", targetExists: true, shimErr: errors.New("busy"), wantRemoved: true, says: "remove checkpoint-x from node node-b: busy"},
		{name: "source leaves it to the target", node: "node-a", targetExists: true},
		{name: "source releases it when the target is gone", node: "node-a", wantReleased: true},
		{name: "another node's", node: "node-c"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			api, shim := &releaseAPI{targetExists: tt.targetExists}, &releaseShim{err: tt.shimErr}
			s, err := New(Options{NodeName: tt.node, API: api, Shim: shim})
			if err != nil {
				t.Fatal(err)
			}
			m := &v1alpha1.PodMigration{
				ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "move", Finalizers: []string{"other", v1alpha1.FinalizerTransferredFiles}},
				Status:     v1alpha1.PodMigrationStatus{SourceNode: "node-a", TargetNode: "node-b", Checkpoint: "checkpoint-x"},
			}
			err = s.release(context.Background(), m)
			if tt.says != "" {
				if err == nil || !strings.Contains(err.Error(), tt.says) {
					t.Fatalf("release: %v, want an error saying %q", err, tt.says)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got := len(shim.removed) > 0; got != tt.wantRemoved {
				t.Errorf("removed %v, want a removal %v", shim.removed, tt.wantRemoved)
			}
			if got := len(api.updated) > 0; got != tt.wantReleased {
				t.Fatalf("updates %d, want a release %v", len(api.updated), tt.wantReleased)
			}
			if tt.wantReleased {
				if f := api.updated[0].Finalizers; len(f) != 1 || f[0] != "other" {
					t.Errorf("finalizers after the release %v, want [other]", f)
				}
				if len(m.Finalizers) != 2 {
					t.Errorf("the listed object was changed: %v", m.Finalizers)
				}
			}
		})
	}
}
