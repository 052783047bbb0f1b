package api

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestPodsEndpoint: the per-pod view is served on GET /pods and in
// /status only with ?pods=true; without it /status leaves it out and the
// model keeps it.
func TestPodsEndpoint(t *testing.T) {
	testutil.RequireRoot(t)
	m := status.New(nil)
	sock := serve(t, m, 0o600, io.Discard)
	if code, _ := get(t, sock, "/pods"); code != http.StatusServiceUnavailable {
		t.Errorf("GET /pods before the monitor read the pods = %d, want 503", code)
	}
	pods := &status.PodPressures{ObservedAt: time.Unix(1700000000, 0).UTC(), Kubepods: "/sys/fs/cgroup/kubepods", Driver: "cgroupfs",
		Items: []status.PodPressure{{UID: "u1", Namespace: "shop", Name: "web", QOS: "Burstable", Cgroup: "/kubepods/burstable/podu1",
			Containers: 2, Memory: status.PodMemory{Source: "cgroup v1", WorkingSetBytes: 1 << 20}}}}
	m.SetPressure(status.Pressure{Pods: pods})

	code, body := get(t, sock, "/pods")
	var got status.PodPressures
	if err := json.Unmarshal([]byte(body), &got); code != http.StatusOK || err != nil || len(got.Items) != 1 || got.Items[0].Name != "web" {
		t.Errorf("GET /pods = %d %s (%v)", code, body, err)
	}
	for _, tc := range []struct {
		query    string
		wantPods bool
	}{{"", false}, {"?pods=true", true}, {"?pods=1", true}, {"?pods=false", false}} {
		code, body := get(t, sock, "/status"+tc.query)
		var d status.Document
		if err := json.Unmarshal([]byte(body), &d); code != http.StatusOK || err != nil || d.Pressure == nil {
			t.Fatalf("GET /status%s = %d %s (%v)", tc.query, code, body, err)
		}
		if (d.Pressure.Pods != nil) != tc.wantPods {
			t.Errorf("GET /status%s: pods %+v, want them: %v", tc.query, d.Pressure.Pods, tc.wantPods)
		}
	}
	if d := m.Snapshot(); d.Pressure.Pods == nil {
		t.Error("serving /status without pods removed them from the model")
	}
}
