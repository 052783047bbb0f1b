package testutil

import (
	"context"
	"net"
	"net/http"
)

// UnixHTTPClient returns an HTTP client whose every request goes to the
// unix socket at sock, whatever the URL's host ("http://nodeshim/..."),
// on a fresh connection each time, so that a test of a server's socket
// never holds a connection across the server's shutdown.
func UnixHTTPClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
}
