package fleet

import (
	"testing"
)

const metricsText = `# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 40
apiserver_request_total{code="409",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="status",verb="PATCH",version="v1"} 5
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="",verb="GET",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 3
`

func TestParseRequests(t *testing.T) {
	r, err := ParseRequests([]byte(metricsText))
	if err != nil {
		t.Fatal(err)
	}
	total, by := r.Writes()
	if total != 47 || by["leases"] != 42 || by["nodes/status"] != 5 {
		t.Errorf("writes %v %v, want 47 with leases 42 and nodes/status 5", total, by)
	}
	if got, _ := r.Reads(); got != 7 {
		t.Errorf("reads %v, want 7 (the /metrics GETs are no resource's)", got)
	}
	before := Requests{{Verb: "PUT", Resource: "leases"}: 30}
	if got, _ := r.Sub(before).Writes(); got != 17 {
		t.Errorf("writes since before %v, want 17", got)
	}
}

func FuzzParseRequests(f *testing.F) {
	f.Add([]byte(metricsText))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ParseRequests(b)
	})
}
