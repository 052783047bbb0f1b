package api

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// TestTransferAccess: a PodCheckpoints caller (the reporter) may have the
// shim send a pod checkpoint to another node, and nothing of the
// receiving route; a read-only caller may do neither. A refused request
// never reaches the handler.
func TestTransferAccess(t *testing.T) {
	testutil.RequireRoot(t)
	var sends, receives, infos atomic.Int32
	h := func(n *atomic.Int32) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { n.Add(1); w.WriteHeader(http.StatusTeapot) })
	}
	serve := func(a Access) string {
		return serveWith(t, Options{Send: h(&sends), Transfer: h(&receives), TransferInfo: h(&infos),
			Auth: func(*http.Request) (Access, string) { return a, "test peer" }})
	}
	full, reporter, reader := serve(FullAccess), serve(PodCheckpoints), serve(ReadOnly)
	for _, tt := range []struct {
		name, sock, method, path string
		want                     int
		sends, receives, infos   int32
	}{
		{"the reporter sends", reporter, "POST", "/transfers/x/send", http.StatusTeapot, 1, 0, 0},
		{"a reader may not send", reader, "POST", "/transfers/x/send", http.StatusForbidden, 1, 0, 0},
		{"the reporter may not receive", reporter, "PUT", "/transfers/x", http.StatusForbidden, 1, 0, 0},
		{"full access reaches the receiver", full, "PUT", "/transfers/x", http.StatusTeapot, 1, 1, 0},
		{"a reader reads where to send", reader, "GET", "/transfers", http.StatusTeapot, 1, 1, 1},
		{"the reporter reads where to send", reporter, "GET", "/transfers", http.StatusTeapot, 1, 1, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, "http://nodeshim"+tt.path, nil)
			resp, err := testutil.UnixHTTPClient(tt.sock).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want || sends.Load() != tt.sends || receives.Load() != tt.receives || infos.Load() != tt.infos {
				t.Errorf("%s %s = %d (sends %d, receives %d, infos %d), want %d (%d, %d, %d)", tt.method, tt.path, resp.StatusCode,
					sends.Load(), receives.Load(), infos.Load(), tt.want, tt.sends, tt.receives, tt.infos)
			}
		})
	}
}
