package api

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"

	"github.com/nodeshim/nodeshim/shim/checkpoint/checkpointtest"
	"github.com/nodeshim/nodeshim/shim/status"
)

// FuzzCheckpointRequest sends arbitrary paths and queries to the API as a
// full-access caller: the answer is always one of kubelet's codes, and the
// checkpointer only ever sees a non-negative timeout.
func FuzzCheckpointRequest(f *testing.F) {
	for _, s := range [][2]string{
		{"/checkpoint/default/web-0/app", ""}, {"/checkpoint/default/web-0/app", "timeout=30"},
		{"/checkpoint/default/web-0/app", "timeout=-5"}, {"/checkpoint/default/web-0/app", "timeout=9223372036854775807"},
		{"/checkpoint/a/b/c/d", ""}, {"/checkpoint/%2e%2e/b/c", "timeout=1&timeout=x"}, {"/checkpoint//b/c", ""},
	} {
		f.Add(s[0], s[1])
	}
	fc := &checkpointtest.Fake{}
	h := NewHandler(status.New(nil), Options{Checkpoint: fc, Auth: func(*http.Request) (Access, string) { return FullAccess, "fuzz" }})
	f.Fuzz(func(t *testing.T, path, query string) {
		u, err := url.Parse("http://nodeshim" + path)
		if err != nil || u.Host != "nodeshim" {
			return
		}
		u.RawQuery = query
		req := &http.Request{Method: http.MethodPost, URL: u, Header: http.Header{}, Host: "nodeshim"}
		req = req.WithContext(t.Context())
		fc.Reset()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if !slices.Contains([]int{200, 301, 307, 404, 405, 500}, w.Code) {
			t.Fatalf("POST %s?%s = %d %s", path, query, w.Code, w.Body)
		}
		for _, d := range fc.Timeouts() {
			if d < 0 {
				t.Fatalf("POST %s?%s gave the checkpointer timeout %v", path, query, d)
			}
		}
	})
}
