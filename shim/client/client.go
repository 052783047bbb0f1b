// Package client is the Go client of nodeshim's node API on its unix
// socket: what `nodeshim status`, `nodeshim checkpoint` and the reporter
// use to read the shim's status and ask it for checkpoints.
package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nodeshim/nodeshim/shim/status"
)

// maxBody bounds what is read of one answer; a status document is a few KB.
const maxBody = 4 << 20

// StatusError is an answer other than 200 from the node API.
type StatusError struct {
	// Method and Path name the request.
	Method, Path string
	// Code is the HTTP status code.
	Code int
	// Message is the API's error message, or the status text.
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.Code, e.Message)
}

// Client talks to one nodeshim serve over its unix socket.
type Client struct {
	socket string
	http   *http.Client
}

// New returns a client of the node API served on socket. Requests take
// their deadline from their context.
func New(socket string) *Client {
	return &Client{socket: socket, http: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConns:    1,
		IdleConnTimeout: 30 * time.Second,
	}}}
}

// Close releases the idle connection to the shim.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Socket is the socket the client talks to.
func (c *Client) Socket() string { return c.socket }

// Do sends a request for path (which may carry a query) and returns the
// body of a 200 answer; the caller closes it. Any other answer is a
// *StatusError carrying the API's message.
func (c *Client) Do(ctx context.Context, method, path string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://nodeshim"+path, nil)
	if err != nil {
		return nil, fmt.Errorf("%s %s on %s: %w", method, path, c.socket, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s on %s: %w", method, path, c.socket, err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp.Body, nil
	}
	defer resp.Body.Close()
	msg := strings.TrimPrefix(resp.Status, strconv.Itoa(resp.StatusCode)+" ")
	var body struct {
		Error string `json:"error"`
	}
	if b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10)); err == nil {
		if json.Unmarshal(b, &body) == nil && body.Error != "" {
			msg = body.Error
		} else if s := strings.TrimSpace(string(b)); s != "" {
			msg = s
		}
	}
	return nil, &StatusError{Method: method, Path: path, Code: resp.StatusCode, Message: msg}
}

// GetJSON reads path and decodes its JSON answer into v.
func (c *Client) GetJSON(ctx context.Context, path string, v any) error {
	return c.decode(ctx, http.MethodGet, path, v)
}

func (c *Client) decode(ctx context.Context, method, path string, v any) error {
	body, err := c.Do(ctx, method, path)
	if err != nil {
		return err
	}
	defer body.Close()
	if err := json.NewDecoder(io.LimitReader(body, maxBody)).Decode(v); err != nil {
		return fmt.Errorf("decode %s %s from %s: %w", method, path, c.socket, err)
	}
	return nil
}

// Status reads GET /status.
func (c *Client) Status(ctx context.Context) (status.Document, error) {
	var d status.Document
	err := c.GetJSON(ctx, "/status", &d)
	return d, err
}

// StatusAfter reads GET /status?after=gen&wait=: a long poll that the
// shim answers once its generation differs from gen, or after wait with
// the unchanged document. A shim without long polls answers at once. The
// context must allow for wait.
func (c *Client) StatusAfter(ctx context.Context, gen int64, wait time.Duration) (status.Document, error) {
	var d status.Document
	err := c.GetJSON(ctx, StatusAfterPath(gen, wait), &d)
	return d, err
}

// StatusAfterPath is the path of a long poll of the status: after gen, for
// wait rounded up to whole seconds.
func StatusAfterPath(gen int64, wait time.Duration) string {
	return "/status?after=" + strconv.FormatInt(gen, 10) +
		"&wait=" + strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10)
}

// Checkpoint asks the shim to checkpoint a container, as kubelet's
// checkpoint API does, and returns the archive's path on the node. A
// timeout of 0 leaves the shim's default.
func (c *Client) Checkpoint(ctx context.Context, namespace, pod, container string, timeout time.Duration) (string, error) {
	for _, p := range []struct{ what, v string }{{"namespace", namespace}, {"pod", pod}, {"container", container}} {
		if p.v == "" {
			return "", fmt.Errorf("checkpoint: empty %s", p.what)
		}
	}
	path := "/checkpoint/" + url.PathEscape(namespace) + "/" + url.PathEscape(pod) + "/" + url.PathEscape(container)
	if timeout > 0 {
		// The API takes whole seconds; round up so that a short timeout
		// never becomes "the default".
		path += "?timeout=" + strconv.FormatInt(int64((timeout+time.Second-1)/time.Second), 10)
	}
	var out struct {
		Items []string `json:"items"`
	}
	if err := c.decode(ctx, http.MethodPost, path, &out); err != nil {
		return "", err
	}
	if len(out.Items) != 1 || out.Items[0] == "" {
		return "", fmt.Errorf("POST %s on %s: answer names %d archives, want 1", path, c.socket, len(out.Items))
	}
	return out.Items[0], nil
}
