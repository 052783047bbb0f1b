package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/shim/status"
)

// fullAccess lets every request through, for tests of the handlers alone.
func fullAccess(*http.Request) (Access, string) { return FullAccess, "test" }

// TestStatusLongPoll checks GET /status?after=: it answers at once when the
// generation already differs, and otherwise when it changes, when the wait
// ends, or when the server stops.
func TestStatusLongPoll(t *testing.T) {
	cond := condition.Condition{Type: "NetworkReady", Status: condition.True, Reason: "Fine"}
	tests := []struct {
		name     string
		query    func(gen int64) string
		during   func(m *status.Model, stop chan struct{}) // while the request waits
		wantCode int
		wantNew  bool // a later generation than the one before the request
	}{
		{"another generation: at once", func(g int64) string { return itoa(g - 1) }, nil, 200, false},
		{"a change ends the wait", func(g int64) string { return itoa(g) },
			func(m *status.Model, _ chan struct{}) { m.Set(cond) }, 200, true},
		{"the wait ends unchanged", func(g int64) string { return itoa(g) + "&wait=0" }, nil, 200, false},
		{"pressure values do not end it", func(g int64) string { return itoa(g) + "&wait=0" },
			func(m *status.Model, _ chan struct{}) { m.SetPressure(status.Pressure{}) }, 200, false},
		{"the server stops", func(g int64) string { return itoa(g) },
			func(_ *status.Model, stop chan struct{}) { close(stop) }, 200, false},
		{"a bad generation", func(int64) string { return "x" }, nil, 400, false},
		{"a bad wait", func(g int64) string { return itoa(g) + "&wait=-1" }, nil, 400, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := status.New(nil)
			m.Set(condition.Condition{Type: "BPFReady", Status: condition.True, Reason: "Fine"})
			stop := make(chan struct{})
			h := NewHandler(m, Options{Auth: fullAccess, Stop: stop})
			gen := m.Snapshot().Generation
			req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/status?after="+tt.query(gen), nil)
			w := httptest.NewRecorder()
			done := make(chan struct{})
			go func() { defer close(done); h.ServeHTTP(w, req) }()
			if tt.during != nil {
				// Whether the handler waits already or not, the answer is
				// the same: it reads the generation again after waiting.
				tt.during(m, stop)
			}
			<-done
			if w.Code != tt.wantCode {
				t.Fatalf("code %d, want %d: %s", w.Code, tt.wantCode, w.Body)
			}
			if w.Code != 200 {
				return
			}
			var d status.Document
			if err := json.Unmarshal(w.Body.Bytes(), &d); err != nil {
				t.Fatal(err)
			}
			if got := d.Generation > gen; got != tt.wantNew {
				t.Errorf("generation %d after %d: changed = %v, want %v", d.Generation, gen, got, tt.wantNew)
			}
		})
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// FuzzStatusQuery sends arbitrary queries to GET /status with the server
// stopping: the answer is 200 or 400, never a hang.
func FuzzStatusQuery(f *testing.F) {
	for _, q := range []string{"", "after=0", "after=1&wait=10", "after=-1", "after=x", "after=1&wait=99999999999",
		"after=1&wait=", "conditions=Ready&after=3", "pods=true&after=0&wait=0"} {
		f.Add(q)
	}
	stop := make(chan struct{})
	close(stop)
	h := NewHandler(status.New(nil), Options{Auth: fullAccess, Stop: stop})
	f.Fuzz(func(t *testing.T, query string) {
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/status", nil)
		req.URL.RawQuery = query
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if !slices.Contains([]int{200, 400}, w.Code) {
			t.Fatalf("GET /status?%s = %d %s", query, w.Code, w.Body)
		}
	})
}

// TestPodsOnDemand checks that the per-pod view is read when asked for:
// GET /pods and GET /status?pods=true refresh it first, GET /status does not.
func TestPodsOnDemand(t *testing.T) {
	for _, tc := range []struct {
		path      string
		wantReads int
	}{
		{"/pods", 1},
		{"/status?pods=true", 1},
		{"/status", 0},
	} {
		t.Run(tc.path, func(t *testing.T) {
			m := status.New(nil)
			m.SetPressure(status.Pressure{})
			reads := 0
			m.SetPodsRefresh(func(context.Context) {
				reads++
				m.SetPods(&status.PodPressures{Items: []status.PodPressure{{UID: "pod-a"}}})
			})
			w := httptest.NewRecorder()
			NewHandler(m, Options{Auth: fullAccess}).ServeHTTP(w, httptest.NewRequestWithContext(t.Context(), http.MethodGet, tc.path, nil))
			if w.Code != 200 || reads != tc.wantReads {
				t.Fatalf("GET %s = %d after %d reads, want 200 after %d: %s", tc.path, w.Code, reads, tc.wantReads, w.Body)
			}
			if got := strings.Contains(w.Body.String(), "pod-a"); got != (tc.wantReads == 1) {
				t.Errorf("GET %s names the pod: %v", tc.path, got)
			}
		})
	}
}
