package election

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/nodeshim/nodeshim/cluster/kubeapi"
	"github.com/nodeshim/nodeshim/testenv/kubetest"
)

// Short periods: a standby takes over 2 s after a leader vanishes, at once
// after one that steps down.
const (
	testLeaseDuration = 2 * time.Second
	testRenewDeadline = 1500 * time.Millisecond
	testRetryPeriod   = 200 * time.Millisecond
)

// TestWithClientGo shares one Lease between this elector and client-go's,
// against a real kube-apiserver: each waits while the other leads, takes
// over at once when the other steps down, and they keep one record.
func TestWithClientGo(t *testing.T) {
	c := kubetest.Start(t)
	cs := c.AdminClient(t)
	api, err := kubeapi.ForConfig(c.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	const ns, name = metav1.NamespaceDefault, "election"
	ctx := context.Background()

	// clientGo runs client-go's elector as id until the returned function
	// is called, which waits for it to step down; leading is closed when
	// it leads.
	clientGo := func(id string) (leading chan struct{}, stop func()) {
		leading = make(chan struct{})
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Client: cs.CoordinationV1(), LockConfig: resourcelock.ResourceLockConfig{Identity: id}},
			LeaseDuration: testLeaseDuration, RenewDeadline: testRenewDeadline, RetryPeriod: testRetryPeriod,
			ReleaseOnCancel: true, Name: name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) { close(leading) },
				OnStoppedLeading: func() {},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { le.Run(lctx); close(done) }()
		return leading, func() { cancel(); <-done }
	}
	holder := func() (string, int32) {
		t.Helper()
		l, err := cs.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return *l.Spec.HolderIdentity, *l.Spec.LeaseTransitions
	}

	theirLead, stopTheirs := clientGo("client-go")
	<-theirLead

	leaders := make(chan string, 16)
	e, err := New(Config{Leases: api, Namespace: ns, Name: name, Identity: "nodeshim", FieldManager: "test",
		LeaseDuration: testLeaseDuration, RenewDeadline: testRenewDeadline, RetryPeriod: testRetryPeriod,
		OnNewLeader: func(id string) { leaders <- id },
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ourCtx, stopOurs := context.WithCancel(ctx)
	ourLead, leadDone, ran := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		e.Run(ourCtx, func(lctx context.Context) {
			close(ourLead)
			<-lctx.Done()
			close(leadDone)
		})
		close(ran)
	}()
	if got := <-leaders; got != "client-go" {
		t.Fatalf("first leader seen %q, want client-go's", got)
	}
	select {
	case <-ourLead:
		t.Fatal("led while client-go's elector held the Lease")
	default:
	}

	// client-go's steps down (releases): ours takes over.
	stopTheirs()
	<-ourLead
	if id, transitions := holder(); id != "nodeshim" || transitions != 1 {
		t.Errorf("Lease held by %q after %d transitions, want nodeshim's after 1", id, transitions)
	}

	// A client-go standby waits; ours steps down and releases once its
	// lead has returned, and the standby takes over.
	theirLead, stopTheirs = clientGo("client-go-2")
	defer stopTheirs()
	stopOurs()
	<-ran
	select {
	case <-leadDone:
	default:
		t.Error("Run returned before the lead did")
	}
	<-theirLead
	if id, transitions := holder(); id != "client-go-2" || transitions != 2 {
		t.Errorf("Lease held by %q after %d transitions, want client-go-2's after 2", id, transitions)
	}
}
