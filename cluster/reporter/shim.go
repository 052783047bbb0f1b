package reporter

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nodeshim/nodeshim/shim/client"
	"github.com/nodeshim/nodeshim/shim/status"
)

// Shim is what the reporter reads: the shim's status document.
type Shim interface {
	Status(ctx context.Context) (Snapshot, error)
}

// LongPoller is a Shim that can wait for a change: StatusAfter answers
// once the status generation differs from gen, or after wait with the
// unchanged status (at once from a shim without long polls). The Reporter
// uses it while nothing is left to retry, instead of reading every
// PollInterval.
type LongPoller interface {
	StatusAfter(ctx context.Context, gen int64, wait time.Duration) (Snapshot, error)
}

// Snapshot is the shim's GET /status as the reporter reads it: the status
// document and, kept as served, the capability report's summary.
type Snapshot struct {
	status.Document
	// Report is the "report" member of the document: the capability
	// report's summary once the shim has collected one; empty before, or
	// from a shim that serves none.
	Report json.RawMessage `json:"report,omitempty"`
}

// SocketClient reads the shim's node API over its unix socket through
// shim/client, with a bound on each request: the shim is local, and an
// answer that takes longer means it is stuck.
type SocketClient struct {
	c *client.Client
}

// requestTimeout bounds one read of the shim.
const requestTimeout = 10 * time.Second

// NewSocketClient returns a client of the node API served on socket.
func NewSocketClient(socket string) *SocketClient {
	return &SocketClient{c: client.New(socket)}
}

// Status reads GET /status.
func (c *SocketClient) Status(ctx context.Context) (Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	var s Snapshot
	err := c.c.GetJSON(ctx, "/status", &s)
	return s, err
}

// StatusAfter reads GET /status?after=gen&wait=: a long poll.
func (c *SocketClient) StatusAfter(ctx context.Context, gen int64, wait time.Duration) (Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, wait+requestTimeout)
	defer cancel()
	var s Snapshot
	err := c.c.GetJSON(ctx, client.StatusAfterPath(gen, wait), &s)
	return s, err
}

// Gather reads the shim's GET /metrics, so that the reporter's metrics
// endpoint relays them (prometheus.Gatherer).
func (c *SocketClient) Gather() ([]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	body, err := c.c.Do(ctx, http.MethodGet, "/metrics")
	if err != nil {
		return nil, err
	}
	defer body.Close()
	return parseMetrics(io.LimitReader(body, 4<<20))
}

// parseMetrics parses the Prometheus text format into metric families.
func parseMetrics(r io.Reader) ([]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse shim metrics: %w", err)
	}
	out := make([]*dto.MetricFamily, 0, len(fams))
	for _, f := range fams {
		out = append(out, f)
	}
	return out, nil
}

// Close releases the idle connection to the shim.
func (c *SocketClient) Close() { c.c.Close() }
