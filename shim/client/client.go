// Package client is the Go client of nodeshim's node API on its unix
// socket: what `nodeshim status`, `nodeshim checkpoint` and the reporter
// use to read the shim's status and ask it for checkpoints.
package client

import (
	"bytes"
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
	socket  string
	timeout time.Duration
	http    *http.Client
}

// DefaultTimeout bounds a request to the shim whose context has no
// deadline, and every connect. The shim is local: an answer that takes
// longer means it is stuck or its API is saturated.
const DefaultTimeout = 10 * time.Second

// Option configures a Client.
type Option func(*Client)

// WithTimeout sets the client's time-out (DefaultTimeout when not
// positive): the bound of every connect and of each request whose context
// has no deadline, beyond the wait the request asks for (a long poll's
// wait, a checkpoint's timeout).
func WithTimeout(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// New returns a client of the node API served on socket. A request's
// deadline is its context's, or the client's time-out when the context
// has none (WithTimeout).
func New(socket string, opts ...Option) *Client {
	c := &Client{socket: socket, timeout: DefaultTimeout}
	for _, o := range opts {
		o(c)
	}
	c.http = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			d := net.Dialer{Timeout: c.timeout}
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConns:    1,
		IdleConnTimeout: 30 * time.Second,
	}}
	return c
}

// Timeout is the client's time-out.
func (c *Client) Timeout() time.Duration { return c.timeout }

// bound gives ctx the client's time-out plus wait when it has no deadline.
// A wait below zero means the request may take any time: it is left
// unbounded (a checkpoint without a timeout, which the shim bounds with
// its configured default).
func (c *Client) bound(ctx context.Context, wait time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || wait < 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.timeout+wait)
}

// Close releases the idle connection to the shim.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Socket is the socket the client talks to.
func (c *Client) Socket() string { return c.socket }

// Do sends a request for path (which may carry a query) and returns the
// body of a 200 answer; the caller closes it. Any other answer is a
// *StatusError carrying the API's message. A context without a deadline
// gets the client's time-out, which then bounds the reading of the body
// too.
func (c *Client) Do(ctx context.Context, method, path string) (io.ReadCloser, error) {
	ctx, cancel := c.bound(ctx, 0)
	body, err := c.do(ctx, method, path)
	if err != nil {
		cancel()
		return nil, err
	}
	return cancelOnClose{body, cancel}, nil
}

// cancelOnClose releases a request's context with its body.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

func (c *Client) do(ctx context.Context, method, path string) (io.ReadCloser, error) {
	return c.doBody(ctx, method, path, nil)
}

// doBody is do with a JSON request body, when body is not nil.
func (c *Client) doBody(ctx context.Context, method, path string, in []byte) (io.ReadCloser, error) {
	var r io.Reader
	if in != nil {
		r = bytes.NewReader(in)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://nodeshim"+path, r)
	if err != nil {
		return nil, fmt.Errorf("%s %s on %s: %w", method, path, c.socket, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s on %s: %w", method, path, c.socket, err)
	}
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNoContent {
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

// GetJSON reads path and decodes its JSON answer into v. A context
// without a deadline gets the client's time-out.
func (c *Client) GetJSON(ctx context.Context, path string, v any) error {
	return c.decode(ctx, http.MethodGet, path, 0, v)
}

// PostJSON posts in, as JSON, to path and decodes the JSON answer into
// out. A context without a deadline gets the client's time-out plus
// wait.
func (c *Client) PostJSON(ctx context.Context, path string, wait time.Duration, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("POST %s: %w", path, err)
	}
	return c.decodeBody(ctx, http.MethodPost, path, b, wait, out)
}

// decode sends the request with the client's time-out plus wait when ctx
// has no deadline, and decodes the answer into v.
func (c *Client) decode(ctx context.Context, method, path string, wait time.Duration, v any) error {
	return c.decodeBody(ctx, method, path, nil, wait, v)
}

// decodeBody is decode with a JSON request body, when in is not nil.
func (c *Client) decodeBody(ctx context.Context, method, path string, in []byte, wait time.Duration, v any) error {
	ctx, cancel := c.bound(ctx, wait)
	defer cancel()
	body, err := c.doBody(ctx, method, path, in)
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
// the unchanged document. A shim without long polls answers at once. A
// context with a deadline must allow for wait; one without gets wait plus
// the client's time-out.
func (c *Client) StatusAfter(ctx context.Context, gen int64, wait time.Duration) (status.Document, error) {
	var d status.Document
	err := c.decode(ctx, http.MethodGet, StatusAfterPath(gen, wait), max(wait, 0), &d)
	return d, err
}

// StatusAfterPath is the path of a long poll of the status: after gen, for
// wait rounded up to whole seconds.
func StatusAfterPath(gen int64, wait time.Duration) string {
	return "/status?after=" + strconv.FormatInt(gen, 10) +
		"&wait=" + strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10)
}

// CheckpointPod asks the shim to checkpoint every container of a pod at
// one instant (POST /checkpoint/{namespace}/{pod}) and returns the pod
// checkpoint's path on the node. imageRef, when set, asks for one
// checkpoint image per container too. timeout and ctx work as for
// Checkpoint. It is CheckpointPodWith with those options.
func (c *Client) CheckpointPod(ctx context.Context, namespace, pod string, timeout time.Duration, imageRef string) (string, error) {
	return c.CheckpointPodWith(ctx, namespace, pod, PodCheckpointOptions{Timeout: timeout, ImageRef: imageRef})
}

// PodCheckpointOptions are the options of a pod checkpoint asked with
// CheckpointPodWith.
type PodCheckpointOptions struct {
	// Timeout bounds the checkpoint (rounded up to whole seconds); zero
	// is the shim's configured default. The request waits as long.
	Timeout time.Duration
	// ImageRef, when set, asks for one checkpoint image per container.
	ImageRef string
	// Lazy asks for the first half of a lazy pod migration (?lazy=true):
	// the answer comes once the pod checkpoint, without the containers'
	// memory, is published, and the shim serves the memory from a page
	// server per container, the pod frozen, until a restore has fetched
	// it or Timeout ends; RemoveCheckpoint of the pod checkpoint ends the
	// serve and lets the pod run on.
	Lazy bool
}

// CheckpointPodWith asks the shim to checkpoint every container of a pod
// at one instant with o (POST /checkpoint/{namespace}/{pod}) and returns
// the pod checkpoint's path on the node.
func (c *Client) CheckpointPodWith(ctx context.Context, namespace, pod string, o PodCheckpointOptions) (string, error) {
	for _, p := range []struct{ what, v string }{{"namespace", namespace}, {"pod", pod}} {
		if p.v == "" {
			return "", fmt.Errorf("checkpoint pod: empty %s", p.what)
		}
	}
	path := "/checkpoint/" + url.PathEscape(namespace) + "/" + url.PathEscape(pod)
	q := url.Values{}
	if o.Timeout > 0 {
		q.Set("timeout", strconv.FormatInt(int64((o.Timeout+time.Second-1)/time.Second), 10))
	}
	if o.ImageRef != "" {
		q.Set("image", o.ImageRef)
	}
	if o.Lazy {
		q.Set("lazy", "true")
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out struct {
		Items []string `json:"items"`
	}
	wait := o.Timeout
	if wait <= 0 {
		wait = -1
	}
	if err := c.decode(ctx, http.MethodPost, path, wait, &out); err != nil {
		return "", err
	}
	if len(out.Items) != 1 || out.Items[0] == "" {
		return "", fmt.Errorf("POST %s on %s: answer names %d pod checkpoints, want 1", path, c.socket, len(out.Items))
	}
	return out.Items[0], nil
}

// RemoveCheckpoint asks the shim to remove the checkpoint name (a
// container archive or a pod checkpoint of the node's checkpoint
// directory, by its base name) through its retention (DELETE
// /checkpoints/{name}); one already gone is no error.
func (c *Client) RemoveCheckpoint(ctx context.Context, name string) error {
	if name == "" {
		return fmt.Errorf("remove checkpoint: empty name")
	}
	ctx, cancel := c.bound(ctx, 0)
	defer cancel()
	body, err := c.do(ctx, http.MethodDelete, "/checkpoints/"+url.PathEscape(name))
	if err != nil {
		return err
	}
	return body.Close()
}

// Checkpoint asks the shim to checkpoint a container, as kubelet's
// checkpoint API does, and returns the archive's path on the node. A
// timeout of 0 leaves the shim's default. A context without a deadline
// gets timeout plus the client's time-out; with a timeout of 0 it is
// bounded by the shim's default alone (the connect by the client's
// time-out).
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
	wait := timeout
	if wait <= 0 {
		wait = -1 // the shim's default, unknown here
	}
	if err := c.decode(ctx, http.MethodPost, path, wait, &out); err != nil {
		return "", err
	}
	if len(out.Items) != 1 || out.Items[0] == "" {
		return "", fmt.Errorf("POST %s on %s: answer names %d archives, want 1", path, c.socket, len(out.Items))
	}
	return out.Items[0], nil
}
