// Package migrationsend is the source node's reporter's half of
// PodMigrations (cluster/migration is the controller's): once the
// controller has a migration's pod checkpoint stored on this node and the
// step Transferred in progress, the reporter asks its shim over the node
// socket to send the pod checkpoint to the target node's shim
// (shim/transfer: mutual TLS with the nodes' own certificates, encrypted
// to the target, signed by this node), and records in the PodMigration's
// status that the target stored it, or why not.
//
// The target is found by the labels its own reporter publishes on its
// Node (v1alpha1.LabelTransferPort and LabelTransferRecipient) and its
// InternalIP. Nothing the API server says is trusted for more than an
// address: the shim sends only to a certificate that names the target
// node, and encrypts only to a recipient of its own configuration.
//
// Before it sends, the reporter holds the PodMigration with
// v1alpha1.FinalizerTransferredFiles; the target node's reporter, which
// runs a Sender too, removes the copy its shim stored once the migration
// is deleted, then the finalizer. A target whose Node is gone holds
// nothing: the source's reporter then removes the finalizer.
//
// A send cut by a restart of the reporter is not resumed: the next
// reporter sends again, and a target that stored the first answers that
// it holds it (which fails the step; the controller then leaves the
// original running).
package migrationsend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodeshim/nodeshim/cluster/apis/v1alpha1"
	"github.com/nodeshim/nodeshim/cluster/kubeapi"
	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/shim/client"
	"github.com/nodeshim/nodeshim/shim/transfer"
)

// API is what the sender asks of the API server (kubeapi.Client).
type API interface {
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	ListPodMigrations(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.PodMigrationList, error)
	WatchPodMigrations(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	GetPodMigration(ctx context.Context, namespace, name string) (*v1alpha1.PodMigration, error)
	UpdatePodMigration(ctx context.Context, m *v1alpha1.PodMigration, fieldManager string) (*v1alpha1.PodMigration, error)
	UpdatePodMigrationStatus(ctx context.Context, m *v1alpha1.PodMigration, fieldManager string) (*v1alpha1.PodMigration, error)
}

// Shim sends one of this node's pod checkpoints to another node's shim
// (POST /transfers/{name}/send), and removes one this node stored (DELETE
// /checkpoints/{name}; one already gone is no error).
type Shim interface {
	SendTransfer(ctx context.Context, name string, req transfer.SendRequest) (transfer.Sent, error)
	RemoveCheckpoint(ctx context.Context, name string) error
}

// SocketShim is a Shim over the node socket's client.
type SocketShim struct{ C *client.Client }

// SendTransfer posts req to the shim's send route of name and waits for
// its answer, bounded by transfer.DefaultTimeout on the shim's side.
func (s SocketShim) SendTransfer(ctx context.Context, name string, req transfer.SendRequest) (transfer.Sent, error) {
	var out transfer.Sent
	err := s.C.PostJSON(ctx, "/transfers/"+url.PathEscape(name)+"/send", transfer.DefaultTimeout, req, &out)
	return out, err
}

// RemoveCheckpoint asks the shim to remove the checkpoint name. A shim
// without checkpoints (404: checkpoint.enabled off) holds none to remove.
func (s SocketShim) RemoveCheckpoint(ctx context.Context, name string) error {
	err := s.C.RemoveCheckpoint(ctx, name)
	if se := (*client.StatusError)(nil); errors.As(err, &se) && se.Code == http.StatusNotFound {
		return nil
	}
	return err
}

// FieldManager is the field manager of the sender's writes (the
// reporter's).
const FieldManager = "nodeshim-reporter"

// Options configure a Sender.
type Options struct {
	// NodeName is this node: the sender takes the migrations whose
	// status.sourceNode is this.
	NodeName string
	API      API
	Shim     Shim
	// Logger; nil discards.
	Logger *slog.Logger
	// Interval is how often the PodMigrations are listed; a second when
	// zero.
	Interval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Sender sends the pod checkpoints of this node's migrations.
type Sender struct {
	o Options
	// mu guards busy: the migrations (by uid) whose send runs.
	mu   sync.Mutex
	busy map[types.UID]bool
	wg   sync.WaitGroup
}

// New returns a Sender for o.
func New(o Options) (*Sender, error) {
	if o.NodeName == "" || o.API == nil || o.Shim == nil {
		return nil, errors.New("migrationsend: no node name, API client or shim")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Sender{o: o, busy: map[types.UID]bool{}}, nil
}

// Run lists the PodMigrations every Interval and starts the send of each
// that waits on this node, until ctx is done; it returns once every send
// it started has ended.
func (s *Sender) Run(ctx context.Context) error {
	defer s.wg.Wait()
	t := time.NewTicker(s.o.Interval)
	defer t.Stop()
	// A watch of the PodMigrations wakes the loop at once when one
	// changes (the controller asks for the send); the interval stays
	// the resync.
	kick := make(chan struct{}, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		kubeapi.Wake(wctx, "PodMigrations", func(ctx context.Context) (watch.Interface, error) {
			return s.o.API.WatchPodMigrations(ctx, metav1.ListOptions{})
		}, kick, 0, func(err error) {
			s.o.Logger.Warn("watch ended; the PodMigrations are listed on the interval until it is open again", "err", err)
		})
	}()
	for {
		if err := s.SyncAll(ctx); err != nil && ctx.Err() == nil {
			s.o.Logger.Warn("list pod migrations", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-kick:
		}
	}
}

// SyncAll starts the send of every PodMigration that waits on this node
// and is not being sent already, and releases every deleted one this node
// holds files of.
func (s *Sender) SyncAll(ctx context.Context) error {
	l, err := s.o.API.ListPodMigrations(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range l.Items {
		m := &l.Items[i]
		if m.DeletionTimestamp != nil {
			if slices.Contains(m.Finalizers, v1alpha1.FinalizerTransferredFiles) {
				if err := s.release(ctx, m); err != nil && ctx.Err() == nil {
					s.o.Logger.Warn("release a deleted pod migration", "namespace", m.Namespace, "name", m.Name, "err", err)
				}
			}
			continue
		}
		if !Waiting(m, s.o.NodeName) {
			continue
		}
		s.mu.Lock()
		if s.busy[m.UID] {
			s.mu.Unlock()
			continue
		}
		s.busy[m.UID] = true
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.busy, m.UID)
				s.mu.Unlock()
			}()
			s.send(ctx, m)
		}()
	}
	return nil
}

// Waiting reports whether m waits for node's shim to send its pod
// checkpoint: Transferring from node, its Transferred step in progress.
func Waiting(m *v1alpha1.PodMigration, node string) bool {
	if m.Status.Phase != v1alpha1.MigrationTransferring || m.Status.SourceNode != node || m.Status.Checkpoint == "" {
		return false
	}
	for _, c := range m.Status.Conditions {
		if c.Type == v1alpha1.ConditionTransferred {
			return c.Status != condition.True && c.Reason == v1alpha1.ReasonTransferring
		}
	}
	return false
}

// send sends m's pod checkpoint and records the outcome.
func (s *Sender) send(ctx context.Context, m *v1alpha1.PodMigration) {
	log := s.o.Logger.With("namespace", m.Namespace, "name", m.Name, "checkpoint", m.Status.Checkpoint, "target", m.Status.TargetNode)
	req, err := s.request(ctx, m.Status.TargetNode)
	var sent transfer.Sent
	if err == nil {
		if herr := s.hold(ctx, m); herr != nil {
			// Nothing is sent that the migration's deletion would not
			// remove; the next round tries again.
			if ctx.Err() == nil {
				log.Warn("hold the pod migration with its finalizer", "err", herr)
			}
			return
		}
		log.Info("sending pod checkpoint", "url", req.URL)
		sent, err = s.o.Shim.SendTransfer(ctx, m.Status.Checkpoint, req)
	}
	if ctx.Err() != nil {
		return // the next reporter sends again
	}
	c := condition.Condition{Type: v1alpha1.ConditionTransferred, Status: condition.True, Reason: v1alpha1.ReasonTransferred,
		Message: fmt.Sprintf("%s stored on node %s: %d bytes sent in %v", m.Status.Checkpoint, m.Status.TargetNode, sent.Sealed, sent.Duration.Round(time.Millisecond))}
	if err != nil {
		log.Warn("send pod checkpoint", "err", err)
		c = condition.Condition{Type: v1alpha1.ConditionTransferred, Status: condition.False, Severity: condition.SeverityError,
			Reason: v1alpha1.ReasonTransferFailed, Message: fmt.Sprintf("send %s from node %s to node %s: %v", m.Status.Checkpoint, s.o.NodeName, m.Status.TargetNode, err)}
	} else {
		log.Info("sent pod checkpoint", "bytes", sent.Sealed, "took", sent.Duration)
	}
	if err := s.record(ctx, m, c); err != nil && ctx.Err() == nil {
		log.Warn("record the transfer in the pod migration", "err", err)
	}
}

// errDeleted: the migration is gone or being deleted.
var errDeleted = errors.New("the pod migration is deleted")

// hold adds FinalizerTransferredFiles to m, read afresh, unless it has it
// or is being deleted (errDeleted); a conflict is retried a few times.
func (s *Sender) hold(ctx context.Context, m *v1alpha1.PodMigration) error {
	var err error
	for range 5 {
		var cur *v1alpha1.PodMigration
		cur, err = s.o.API.GetPodMigration(ctx, m.Namespace, m.Name)
		if apierrors.IsNotFound(err) {
			return errDeleted
		}
		if err != nil {
			return err
		}
		switch {
		case cur.UID != m.UID || cur.DeletionTimestamp != nil:
			return errDeleted
		case slices.Contains(cur.Finalizers, v1alpha1.FinalizerTransferredFiles):
			return nil
		}
		cur.Finalizers = append(cur.Finalizers, v1alpha1.FinalizerTransferredFiles)
		if _, err = s.o.API.UpdatePodMigration(ctx, cur, FieldManager); !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}

// release lets the deleted migration m go once this node holds nothing of
// it: as its target, the pod checkpoint its shim stored is removed first;
// as its source, only when the target's Node is gone (nobody else would).
// Another node's migration is left to its nodes.
func (s *Sender) release(ctx context.Context, m *v1alpha1.PodMigration) error {
	switch node := s.o.NodeName; {
	case m.Status.TargetNode == node:
		if m.Status.Checkpoint != "" {
			if err := s.o.Shim.RemoveCheckpoint(ctx, m.Status.Checkpoint); err != nil {
				return fmt.Errorf("remove %s from node %s: %w", m.Status.Checkpoint, node, err)
			}
		}
	case m.Status.SourceNode == node && m.Status.TargetNode != "":
		if _, err := s.o.API.GetNode(ctx, m.Status.TargetNode); !apierrors.IsNotFound(err) {
			return err // the target's own reporter releases it
		}
	case m.Status.SourceNode == node:
	default:
		return nil
	}
	m = m.DeepCopy()
	m.Finalizers = slices.DeleteFunc(m.Finalizers, func(f string) bool { return f == v1alpha1.FinalizerTransferredFiles })
	if _, err := s.o.API.UpdatePodMigration(ctx, m, FieldManager); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove the finalizer: %w", err)
	}
	s.o.Logger.Info("released a deleted pod migration", "namespace", m.Namespace, "name", m.Name, "checkpoint", m.Status.Checkpoint)
	return nil
}

// request is the shim's send request to node: its certificate's name,
// its InternalIP and the port and recipient its labels publish.
func (s *Sender) request(ctx context.Context, node string) (transfer.SendRequest, error) {
	n, err := s.o.API.GetNode(ctx, node)
	if err != nil {
		return transfer.SendRequest{}, fmt.Errorf("get node %s: %w", node, err)
	}
	return Request(n)
}

// Request is the send request to n, from its labels and InternalIP; an
// error names what n lacks.
func Request(n *corev1.Node) (transfer.SendRequest, error) {
	port, rec := n.Labels[v1alpha1.LabelTransferPort], n.Labels[v1alpha1.LabelTransferRecipient]
	if port == "" || rec == "" {
		return transfer.SendRequest{}, fmt.Errorf("node %s receives no transfers: no %s or %s label (its shim's checkpoint.transfer.enabled)", n.Name, v1alpha1.LabelTransferPort, v1alpha1.LabelTransferRecipient)
	}
	ip := ""
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			ip = a.Address
			break
		}
	}
	if net.ParseIP(ip) == nil {
		return transfer.SendRequest{}, fmt.Errorf("node %s has no InternalIP address to send to", n.Name)
	}
	return transfer.SendRequest{Node: n.Name, URL: "https://" + net.JoinHostPort(ip, port), Recipient: rec}, nil
}

// record writes c into m's status, read afresh, while m still waits on
// this node; a conflict is retried a few times.
func (s *Sender) record(ctx context.Context, m *v1alpha1.PodMigration, c condition.Condition) error {
	var err error
	for range 5 {
		var cur *v1alpha1.PodMigration
		cur, err = s.o.API.GetPodMigration(ctx, m.Namespace, m.Name)
		if err != nil {
			return err
		}
		if cur.UID != m.UID || !Waiting(cur, s.o.NodeName) {
			return nil // deleted, or taken past this step meanwhile
		}
		cur.SetConditions(s.o.Now(), c)
		if _, err = s.o.API.UpdatePodMigrationStatus(ctx, cur, FieldManager); !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}
