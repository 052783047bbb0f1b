package reporter

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nodeshim/nodeshim/shim/status"
)

// Shim is what the reporter reads: the shim's status document.
type Shim interface {
	Status(ctx context.Context) (Snapshot, error)
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

// SocketClient reads the shim's node API over its unix socket.
type SocketClient struct {
	socket string
	http   *http.Client
}

// NewSocketClient returns a client of the node API served on socket.
func NewSocketClient(socket string) *SocketClient {
	return &SocketClient{socket: socket, http: &http.Client{
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", socket)
			},
			MaxIdleConns:    1,
			IdleConnTimeout: 30 * time.Second,
		},
		// The shim is local: an answer that takes this long means it is stuck.
		Timeout: 10 * time.Second,
	}}
}

func (c *SocketClient) get(ctx context.Context, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://nodeshim"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s on %s: %w", path, c.socket, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s on %s: %s", path, c.socket, resp.Status)
	}
	return resp, nil
}

// Status reads GET /status.
func (c *SocketClient) Status(ctx context.Context) (Snapshot, error) {
	var d Snapshot
	resp, err := c.get(ctx, "/status")
	if err != nil {
		return d, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&d); err != nil {
		return d, fmt.Errorf("decode status from %s: %w", c.socket, err)
	}
	return d, nil
}

// Gather reads the shim's GET /metrics, so that the reporter's metrics
// endpoint relays them (prometheus.Gatherer).
func (c *SocketClient) Gather() ([]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return parseMetrics(io.LimitReader(resp.Body, 4<<20))
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
func (c *SocketClient) Close() { c.http.CloseIdleConnections() }
