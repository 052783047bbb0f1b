// Package kubeapi is the reporter's client of the Kubernetes API server:
// the six requests it makes (read a Node, patch its status, create an
// Event, read, create and renew a Lease) over client-go's REST client,
// with a scheme of only core/v1 and coordination.k8s.io/v1. It does not
// link client-go's clientset, whose scheme registers every API group of
// Kubernetes: a reporter binary built on it is half the size, which on a
// kernel that maps executables in large folios is half its resident memory.
package kubeapi

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Client makes the reporter's requests. It satisfies reporter.API.
type Client struct {
	core, coordination rest.Interface
}

// New returns a Client over REST clients of core/v1 and
// coordination.k8s.io/v1, such as those of a client-go clientset
// (cs.CoreV1().RESTClient(), cs.CoordinationV1().RESTClient()).
func New(core, coordination rest.Interface) *Client {
	return &Client{core: core, coordination: coordination}
}

// ForConfig returns a Client for cfg with its own small scheme.
func ForConfig(cfg *rest.Config) (*Client, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, coordinationv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("kubeapi scheme: %w", err)
		}
	}
	codecs := serializer.NewCodecFactory(s).WithoutConversion()
	client := func(gv schema.GroupVersion, apiPath string) (rest.Interface, error) {
		c := rest.CopyConfig(cfg)
		c.GroupVersion, c.APIPath, c.NegotiatedSerializer = &gv, apiPath, codecs
		if c.UserAgent == "" {
			c.UserAgent = rest.DefaultKubernetesUserAgent()
		}
		rc, err := rest.RESTClientFor(c)
		if err != nil {
			return nil, fmt.Errorf("REST client for %s on %s: %w", gv, cfg.Host, err)
		}
		return rc, nil
	}
	core, err := client(corev1.SchemeGroupVersion, "/api")
	if err != nil {
		return nil, err
	}
	// Both clients share one HTTP transport: client-go caches it by config.
	coord, err := client(coordinationv1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, err
	}
	return New(core, coord), nil
}

// GetNode reads the Node name.
func (c *Client) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	var n corev1.Node
	err := c.core.Get().Resource("nodes").Name(name).Do(ctx).Into(&n)
	return &n, err
}

// PatchNodeStatus applies a strategic-merge patch to the status of the
// Node name as fieldManager.
func (c *Client) PatchNodeStatus(ctx context.Context, name string, patch []byte, fieldManager string) error {
	return c.core.Patch(types.StrategicMergePatchType).Resource("nodes").Name(name).SubResource("status").
		Param("fieldManager", fieldManager).Body(patch).Do(ctx).Error()
}

// CreateEvent creates e in its namespace.
func (c *Client) CreateEvent(ctx context.Context, e *corev1.Event) error {
	e = e.DeepCopy()
	e.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Event"}
	return c.core.Post().Namespace(e.Namespace).Resource("events").Body(e).Do(ctx).Error()
}

// GetLease reads the Lease namespace/name.
func (c *Client) GetLease(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error) {
	var l coordinationv1.Lease
	err := c.coordination.Get().Namespace(namespace).Resource("leases").Name(name).Do(ctx).Into(&l)
	return &l, err
}

// CreateLease creates l as fieldManager and returns it as created.
func (c *Client) CreateLease(ctx context.Context, l *coordinationv1.Lease, fieldManager string) (*coordinationv1.Lease, error) {
	l = l.DeepCopy()
	l.TypeMeta = metav1.TypeMeta{APIVersion: coordinationv1.SchemeGroupVersion.String(), Kind: "Lease"}
	var out coordinationv1.Lease
	err := c.coordination.Post().Namespace(l.Namespace).Resource("leases").Param("fieldManager", fieldManager).
		Body(l).Do(ctx).Into(&out)
	return &out, err
}

// UpdateLease replaces l as fieldManager and returns it as stored.
func (c *Client) UpdateLease(ctx context.Context, l *coordinationv1.Lease, fieldManager string) (*coordinationv1.Lease, error) {
	l = l.DeepCopy()
	l.TypeMeta = metav1.TypeMeta{APIVersion: coordinationv1.SchemeGroupVersion.String(), Kind: "Lease"}
	var out coordinationv1.Lease
	err := c.coordination.Put().Namespace(l.Namespace).Resource("leases").Name(l.Name).Param("fieldManager", fieldManager).
		Body(l).Do(ctx).Into(&out)
	return &out, err
}

// LoadConfig loads the client configuration of kubeconfig, or the
// in-cluster configuration (the pod's ServiceAccount) when it is empty.
func LoadConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster configuration (give --kubeconfig outside a pod): %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}
