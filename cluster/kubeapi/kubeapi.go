// Package kubeapi is nodeshim's client of the Kubernetes API server: the
// requests the reporter makes (read a Node, patch its status, create an
// Event, read, create and renew a Lease) and those the controller adds
// (list and watch Nodes and Leases for its informers), over client-go's
// REST client, with a scheme of only core/v1 and coordination.k8s.io/v1.
// It does not link client-go's clientset, whose scheme registers every API
// group of Kubernetes: a binary built on it is half the size, and a Go
// daemon maps nearly all of its binary (BENCHMARKS.md, Footprint), so half
// its resident memory.
package kubeapi

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeshim/nodeshim/cluster/apis/v1alpha1"
)

// Client makes the reporter's and the controller's requests. It satisfies
// reporter.API.
type Client struct {
	core, coordination rest.Interface
	// nodeshim is the client of nodeshim.io/v1alpha1 (PodCheckpoints);
	// nil unless made by ForConfig or given to WithNodeshim.
	nodeshim rest.Interface
	// params encodes list and watch options into query parameters; built
	// on first use, which the reporter never makes.
	params func() runtime.ParameterCodec
}

// New returns a Client over REST clients of core/v1 and
// coordination.k8s.io/v1, such as those of a client-go clientset
// (cs.CoreV1().RESTClient(), cs.CoordinationV1().RESTClient()).
func New(core, coordination rest.Interface) *Client {
	return &Client{core: core, coordination: coordination, params: sync.OnceValue(func() runtime.ParameterCodec {
		return runtime.NewParameterCodec(newScheme())
	})}
}

// newScheme returns a scheme of core/v1 and coordination.k8s.io/v1 only,
// with the list and watch options of each (their AddToScheme registers
// them, as client-go's scheme does).
func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	// Neither AddToScheme can fail on a new scheme: each registers its
	// own types once.
	utilruntime.Must(corev1.AddToScheme(s))
	utilruntime.Must(coordinationv1.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}

// WithNodeshim returns c with rc as its client of nodeshim.io/v1alpha1.
func (c *Client) WithNodeshim(rc rest.Interface) *Client {
	out := *c
	out.nodeshim = rc
	return &out
}

// ForConfig returns a Client for cfg with its own small scheme.
func ForConfig(cfg *rest.Config) (*Client, error) {
	s := newScheme()
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
	ns, err := client(v1alpha1.GroupVersion(), "/apis")
	if err != nil {
		return nil, err
	}
	return New(core, coord).WithNodeshim(ns), nil
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

// PatchNodeLabels sets (a value) and removes (nil) the labels of the Node
// name as fieldManager, with a JSON merge patch of metadata.labels alone
// through the status subresource (the Node status strategy resets spec,
// not metadata): no other label and nothing else of the Node is named.
func (c *Client) PatchNodeLabels(ctx context.Context, name string, labels map[string]*string, fieldManager string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		return fmt.Errorf("labels patch of node %s: %w", name, err)
	}
	return c.core.Patch(types.MergePatchType).Resource("nodes").Name(name).SubResource("status").
		Param("fieldManager", fieldManager).Body(body).Do(ctx).Error()
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

// ListNodes lists the Nodes, as an informer's ListFunc.
func (c *Client) ListNodes(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	var l corev1.NodeList
	err := c.core.Get().Resource("nodes").VersionedParams(&opts, c.params()).Timeout(timeout(opts)).Do(ctx).Into(&l)
	return &l, err
}

// WatchNodes watches the Nodes, as an informer's WatchFunc.
func (c *Client) WatchNodes(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.core.Get().Resource("nodes").VersionedParams(&opts, c.params()).Timeout(timeout(opts)).Watch(ctx)
}

// ListLeases lists the Leases in namespace, as an informer's ListFunc.
func (c *Client) ListLeases(ctx context.Context, namespace string, opts metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	var l coordinationv1.LeaseList
	err := c.coordination.Get().Namespace(namespace).Resource("leases").VersionedParams(&opts, c.params()).
		Timeout(timeout(opts)).Do(ctx).Into(&l)
	return &l, err
}

// WatchLeases watches the Leases in namespace, as an informer's WatchFunc.
func (c *Client) WatchLeases(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.coordination.Get().Namespace(namespace).Resource("leases").VersionedParams(&opts, c.params()).
		Timeout(timeout(opts)).Watch(ctx)
}

// timeout is the request timeout opts ask for, as client-go's typed
// clients set it: none when they ask for none.
func timeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
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

// GetPod reads the Pod namespace/name.
func (c *Client) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	var p corev1.Pod
	err := c.core.Get().Namespace(namespace).Resource("pods").Name(name).Do(ctx).Into(&p)
	return &p, err
}

// CreatePod creates p in its namespace as fieldManager.
func (c *Client) CreatePod(ctx context.Context, p *corev1.Pod, fieldManager string) (*corev1.Pod, error) {
	in := p.DeepCopy()
	in.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	var out corev1.Pod
	err := c.core.Post().Namespace(in.Namespace).Resource("pods").Param("fieldManager", fieldManager).Body(in).Do(ctx).Into(&out)
	return &out, err
}

// errNoNodeshim is returned by the PodCheckpoint requests of a Client
// without a client of nodeshim.io/v1alpha1.
var errNoNodeshim = fmt.Errorf("no client of %s", v1alpha1.GroupVersion())

// ListPodCheckpoints lists the PodCheckpoints of every namespace.
func (c *Client) ListPodCheckpoints(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.PodCheckpointList, error) {
	if c.nodeshim == nil {
		return nil, errNoNodeshim
	}
	var l v1alpha1.PodCheckpointList
	err := c.nodeshim.Get().Resource("podcheckpoints").VersionedParams(&opts, c.params()).
		Timeout(timeout(opts)).Do(ctx).Into(&l)
	return &l, err
}

// GetPodCheckpoint reads the PodCheckpoint namespace/name.
func (c *Client) GetPodCheckpoint(ctx context.Context, namespace, name string) (*v1alpha1.PodCheckpoint, error) {
	if c.nodeshim == nil {
		return nil, errNoNodeshim
	}
	var pc v1alpha1.PodCheckpoint
	err := c.nodeshim.Get().Namespace(namespace).Resource("podcheckpoints").Name(name).Do(ctx).Into(&pc)
	return &pc, err
}

// ListPodCheckpointsIn lists the PodCheckpoints of namespace.
func (c *Client) ListPodCheckpointsIn(ctx context.Context, namespace string, opts metav1.ListOptions) (*v1alpha1.PodCheckpointList, error) {
	if c.nodeshim == nil {
		return nil, errNoNodeshim
	}
	var l v1alpha1.PodCheckpointList
	err := c.nodeshim.Get().Namespace(namespace).Resource("podcheckpoints").VersionedParams(&opts, c.params()).
		Timeout(timeout(opts)).Do(ctx).Into(&l)
	return &l, err
}

// WatchPodCheckpoints watches the PodCheckpoints of every namespace.
func (c *Client) WatchPodCheckpoints(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if c.nodeshim == nil {
		return nil, errNoNodeshim
	}
	opts.Watch = true
	return c.nodeshim.Get().Resource("podcheckpoints").VersionedParams(&opts, c.params()).
		Timeout(timeout(opts)).Watch(ctx)
}

// CreatePodCheckpoint creates pc in its namespace as fieldManager.
func (c *Client) CreatePodCheckpoint(ctx context.Context, pc *v1alpha1.PodCheckpoint, fieldManager string) (*v1alpha1.PodCheckpoint, error) {
	if c.nodeshim == nil {
		return nil, errNoNodeshim
	}
	in := pc.DeepCopy()
	in.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion().String(), Kind: "PodCheckpoint"}
	var out v1alpha1.PodCheckpoint
	err := c.nodeshim.Post().Namespace(in.Namespace).Resource("podcheckpoints").
		Param("fieldManager", fieldManager).Body(in).Do(ctx).Into(&out)
	return &out, err
}

// DeletePodCheckpoint deletes the PodCheckpoint namespace/name; its node
// removes the checkpoint before the API server lets it go.
func (c *Client) DeletePodCheckpoint(ctx context.Context, namespace, name string) error {
	if c.nodeshim == nil {
		return errNoNodeshim
	}
	return c.nodeshim.Delete().Namespace(namespace).Resource("podcheckpoints").Name(name).Do(ctx).Error()
}

// UpdatePodCheckpoint writes pc's metadata and spec (its finalizers) as
// fieldManager and returns what the API server stored.
func (c *Client) UpdatePodCheckpoint(ctx context.Context, pc *v1alpha1.PodCheckpoint, fieldManager string) (*v1alpha1.PodCheckpoint, error) {
	return c.putPodCheckpoint(ctx, pc, "", fieldManager)
}

// UpdatePodCheckpointStatus writes pc's status as fieldManager and
// returns what the API server stored.
func (c *Client) UpdatePodCheckpointStatus(ctx context.Context, pc *v1alpha1.PodCheckpoint, fieldManager string) (*v1alpha1.PodCheckpoint, error) {
	return c.putPodCheckpoint(ctx, pc, "status", fieldManager)
}

func (c *Client) putPodCheckpoint(ctx context.Context, pc *v1alpha1.PodCheckpoint, sub, fieldManager string) (*v1alpha1.PodCheckpoint, error) {
	if c.nodeshim == nil {
		return nil, errNoNodeshim
	}
	in := pc.DeepCopy()
	in.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion().String(), Kind: "PodCheckpoint"}
	req := c.nodeshim.Put().Namespace(in.Namespace).Resource("podcheckpoints").Name(in.Name)
	if sub != "" {
		req = req.SubResource(sub)
	}
	var out v1alpha1.PodCheckpoint
	err := req.Param("fieldManager", fieldManager).Body(in).Do(ctx).Into(&out)
	return &out, err
}

// CordonNode marks the Node name unschedulable (spec.unschedulable, as
// `kubectl cordon` does) as fieldManager, with a JSON merge patch of that
// field alone.
func (c *Client) CordonNode(ctx context.Context, name, fieldManager string) error {
	return c.core.Patch(types.MergePatchType).Resource("nodes").Name(name).Param("fieldManager", fieldManager).
		Body([]byte(`{"spec":{"unschedulable":true}}`)).Do(ctx).Error()
}

// ListPods lists the Pods of every namespace that opts selects (e.g. the
// field selector spec.nodeName=NODE).
func (c *Client) ListPods(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	var l corev1.PodList
	err := c.core.Get().Resource("pods").VersionedParams(&opts, c.params()).Timeout(timeout(opts)).Do(ctx).Into(&l)
	return &l, err
}

// EvictPod asks the API server to evict the Pod namespace/name through
// the eviction subresource (policy/v1 Eviction), which honours its
// PodDisruptionBudgets: a 429 says one forbids it now, and is returned at
// once (client-go would wait out its Retry-After, ten times over), for
// the caller to ask again when it chooses.
func (c *Client) EvictPod(ctx context.Context, namespace, name string) error {
	body, err := json.Marshal(map[string]any{"apiVersion": "policy/v1", "kind": "Eviction",
		"metadata": map[string]string{"name": name, "namespace": namespace}})
	if err != nil {
		return err
	}
	return c.core.Post().Namespace(namespace).Resource("pods").Name(name).SubResource("eviction").MaxRetries(0).Body(body).Do(ctx).Error()
}

// DeletePod deletes the Pod namespace/name, only if its uid is still uid
// (a precondition: never a pod of the same name made since).
func (c *Client) DeletePod(ctx context.Context, namespace, name string, uid types.UID) error {
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
	opts.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "DeleteOptions"}
	return c.core.Delete().Namespace(namespace).Resource("pods").Name(name).Body(&opts).Do(ctx).Error()
}

// PatchPodAnnotations sets (a value) and removes (nil) annotations of the
// Pod namespace/name as fieldManager, with a JSON merge patch of
// metadata.annotations alone.
func (c *Client) PatchPodAnnotations(ctx context.Context, namespace, name string, annotations map[string]*string, fieldManager string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return fmt.Errorf("annotations patch of pod %s/%s: %w", namespace, name, err)
	}
	return c.core.Patch(types.MergePatchType).Namespace(namespace).Resource("pods").Name(name).
		Param("fieldManager", fieldManager).Body(body).Do(ctx).Error()
}

// ListPodMigrations lists the PodMigrations of every namespace.
func (c *Client) ListPodMigrations(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.PodMigrationList, error) {
	if c.nodeshim == nil {
		return nil, errNoNodeshim
	}
	var l v1alpha1.PodMigrationList
	err := c.nodeshim.Get().Resource("podmigrations").VersionedParams(&opts, c.params()).
		Timeout(timeout(opts)).Do(ctx).Into(&l)
	return &l, err
}

// WatchPodMigrations watches the PodMigrations of every namespace.
func (c *Client) WatchPodMigrations(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if c.nodeshim == nil {
		return nil, errNoNodeshim
	}
	opts.Watch = true
	return c.nodeshim.Get().Resource("podmigrations").VersionedParams(&opts, c.params()).
		Timeout(timeout(opts)).Watch(ctx)
}

// GetPodMigration reads the PodMigration namespace/name.
func (c *Client) GetPodMigration(ctx context.Context, namespace, name string) (*v1alpha1.PodMigration, error) {
	if c.nodeshim == nil {
		return nil, errNoNodeshim
	}
	var m v1alpha1.PodMigration
	err := c.nodeshim.Get().Namespace(namespace).Resource("podmigrations").Name(name).Do(ctx).Into(&m)
	return &m, err
}

// CreatePodMigration creates m in its namespace as fieldManager.
func (c *Client) CreatePodMigration(ctx context.Context, m *v1alpha1.PodMigration, fieldManager string) (*v1alpha1.PodMigration, error) {
	if c.nodeshim == nil {
		return nil, errNoNodeshim
	}
	in := m.DeepCopy()
	in.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion().String(), Kind: "PodMigration"}
	var out v1alpha1.PodMigration
	err := c.nodeshim.Post().Namespace(in.Namespace).Resource("podmigrations").
		Param("fieldManager", fieldManager).Body(in).Do(ctx).Into(&out)
	return &out, err
}

// UpdatePodMigration writes m's metadata and spec (its finalizers) as
// fieldManager and returns what the API server stored.
func (c *Client) UpdatePodMigration(ctx context.Context, m *v1alpha1.PodMigration, fieldManager string) (*v1alpha1.PodMigration, error) {
	if c.nodeshim == nil {
		return nil, errNoNodeshim
	}
	in := m.DeepCopy()
	in.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion().String(), Kind: "PodMigration"}
	var out v1alpha1.PodMigration
	err := c.nodeshim.Put().Namespace(in.Namespace).Resource("podmigrations").Name(in.Name).
		Param("fieldManager", fieldManager).Body(in).Do(ctx).Into(&out)
	return &out, err
}

// UpdatePodMigrationStatus writes m's status as fieldManager and returns
// what the API server stored.
func (c *Client) UpdatePodMigrationStatus(ctx context.Context, m *v1alpha1.PodMigration, fieldManager string) (*v1alpha1.PodMigration, error) {
	if c.nodeshim == nil {
		return nil, errNoNodeshim
	}
	in := m.DeepCopy()
	in.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion().String(), Kind: "PodMigration"}
	var out v1alpha1.PodMigration
	err := c.nodeshim.Put().Namespace(in.Namespace).Resource("podmigrations").Name(in.Name).SubResource("status").
		Param("fieldManager", fieldManager).Body(in).Do(ctx).Into(&out)
	return &out, err
}

// DeletePodMigration deletes the PodMigration namespace/name.
func (c *Client) DeletePodMigration(ctx context.Context, namespace, name string) error {
	if c.nodeshim == nil {
		return errNoNodeshim
	}
	return c.nodeshim.Delete().Namespace(namespace).Resource("podmigrations").Name(name).Do(ctx).Error()
}
