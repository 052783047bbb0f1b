package fleet

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// Requests counts the API server's requests by verb and resource
// (resource/subresource), from apiserver_request_total.
type Requests map[RequestKey]float64

// RequestKey names one series of Requests.
type RequestKey struct {
	// Verb is the metric's verb: GET, LIST, WATCH, POST, PUT, PATCH,
	// DELETE, APPLY.
	Verb string
	// Resource is resource or resource/subresource: leases, nodes/status.
	Resource string
}

// writeVerbs are the verbs of apiserver_request_total that write.
var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "DELETE": true, "DELETECOLLECTION": true, "APPLY": true}

// IsWrite reports whether k is a write.
func (k RequestKey) IsWrite() bool { return writeVerbs[k.Verb] }

// ScrapeRequests reads the API server's /metrics through cs.
func ScrapeRequests(ctx context.Context, cs kubernetes.Interface) (Requests, error) {
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the API server's metrics: %w", err)
	}
	return ParseRequests(body)
}

// ParseRequests sums apiserver_request_total over codes and scopes, by
// verb and resource, from the Prometheus text format. Requests for no
// resource (/metrics, /readyz) are left out.
func ParseRequests(text []byte) (Requests, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("parse the API server's metrics: %w", err)
	}
	out := Requests{}
	fam, ok := fams["apiserver_request_total"]
	if !ok {
		return out, nil
	}
	for _, m := range fam.GetMetric() {
		var k RequestKey
		var sub string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "verb":
				k.Verb = l.GetValue()
			case "resource":
				k.Resource = l.GetValue()
			case "subresource":
				sub = l.GetValue()
			}
		}
		if k.Resource == "" {
			continue
		}
		if sub != "" {
			k.Resource += "/" + sub
		}
		out[k] += m.GetCounter().GetValue()
	}
	return out, nil
}

// Sub returns r minus before, series by series.
func (r Requests) Sub(before Requests) Requests {
	out := Requests{}
	for k, v := range r {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// Writes returns the number of writes, in total and by resource.
func (r Requests) Writes() (total float64, byResource map[string]float64) {
	byResource = map[string]float64{}
	for k, v := range r {
		if k.IsWrite() {
			total += v
			byResource[k.Resource] += v
		}
	}
	return total, byResource
}

// Reads returns the number of GET and LIST requests, in total and by
// resource.
func (r Requests) Reads() (total float64, byResource map[string]float64) {
	byResource = map[string]float64{}
	for k, v := range r {
		if k.Verb == "GET" || k.Verb == "LIST" {
			total += v
			byResource[k.Resource] += v
		}
	}
	return total, byResource
}

// FormatRates formats by-resource counts as rates over secs, sorted.
func FormatRates(byResource map[string]float64, secs float64) string {
	var parts []string
	for _, res := range slices.Sorted(maps.Keys(byResource)) {
		parts = append(parts, fmt.Sprintf("%s %.2f/s", res, byResource[res]/secs))
	}
	return strings.Join(parts, ", ")
}
