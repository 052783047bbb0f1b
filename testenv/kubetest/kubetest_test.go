package kubetest

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, ClientLoops()...)
}

func TestDecode(t *testing.T) {
	cases := []struct {
		name      string
		in        string
		wantKinds []string
		wantErr   bool
	}{
		{"empty", "", nil, false},
		{"one", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n", []string{"Namespace"}, false},
		{"two with separators and an empty document", "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: b, namespace: a}\n", []string{"Namespace", "ServiceAccount"}, false},
		{"json", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a"}}`, []string{"Namespace"}, false},
		{"no kind", "apiVersion: v1\nmetadata: {name: a}\n", nil, true},
		{"not yaml", "a: [b\n", nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Decode([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, o.GetKind())
			}
			if len(kinds) != len(tc.wantKinds) {
				t.Fatalf("kinds = %v, want %v", kinds, tc.wantKinds)
			}
			for i := range kinds {
				if kinds[i] != tc.wantKinds[i] {
					t.Fatalf("kinds = %v, want %v", kinds, tc.wantKinds)
				}
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n---\nkind: X\n"))
	f.Add([]byte(`{"apiVersion":"v1","kind":"Namespace"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		objs, err := Decode(b)
		if err != nil {
			return
		}
		for _, o := range objs {
			if o.GetKind() == "" || o.GetAPIVersion() == "" {
				t.Fatalf("object without kind or apiVersion: %v", o.Object)
			}
		}
	})
}

const readNodesRBAC = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: node-reader
rules:
- apiGroups: [""]
  resources: [nodes]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: node-reader
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: node-reader
subjects:
- kind: ServiceAccount
  name: reader
  namespace: kubetest
`

// TestCluster starts a real etcd and kube-apiserver, checks that RBAC
// applies to a ServiceAccount token (forbidden, then allowed once bound),
// and that the data survives an API server restart over the same etcd.
func TestCluster(t *testing.T) {
	c := Start(t)
	ctx := context.Background()
	admin := c.AdminClient(t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kubetest-node"}}
	created, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	sa, err := kubernetes.NewForConfig(c.ServiceAccountConfig(t, "kubetest", "reader"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sa.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("get node as an unbound ServiceAccount: err = %v, want Forbidden", err)
	}
	c.MustApply(t, []byte(readNodesRBAC))
	// RBAC reads its objects through an informer: the grant shows after a
	// moment, so wait for it (go test's -timeout bounds the wait).
	for {
		_, err := sa.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err == nil {
			break
		}
		if !apierrors.IsForbidden(err) {
			t.Fatal(err)
		}
	}
	if _, err := sa.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("list nodes with get only: err = %v, want Forbidden", err)
	}

	c.StopAPIServer()
	if _, err := admin.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); err == nil {
		t.Fatal("get node with the API server stopped succeeded")
	}
	if err := c.StartAPIServer(t); err != nil {
		t.Fatal(err)
	}
	got, err := sa.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node after restart: %v", err)
	}
	if got.UID != created.UID {
		t.Fatalf("node uid %s after the restart, %s before", got.UID, created.UID)
	}
}

// TestStartWithRefusesTokenFileInjection: a static token user whose token,
// name or groups hold the token file's separators is refused before any
// process starts, so that it cannot add a user or a group to the file.
func TestStartWithRefusesTokenFileInjection(t *testing.T) {
	for _, tk := range []Token{
		{Token: "t,0,evil", User: "u"},
		{Token: "t", User: "u\nroot-token,admin,admin,\"system:masters\""},
		{Token: "t", User: "u", Groups: []string{"a\",\"system:masters"}},
	} {
		_, err := StartWith(t.TempDir(), "/nonexistent/kube-apiserver", "/nonexistent/etcd", Options{Tokens: []Token{tk}})
		if err == nil || !strings.Contains(err.Error(), "token file") {
			t.Errorf("token %+v: %v; want it refused", tk, err)
		}
	}
}
