package transfer

import (
	"archive/tar"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// SendOptions say how a pod checkpoint is sent.
type SendOptions struct {
	// Client makes the request: its transport presents this node's
	// certificate and verifies the receiver's (ClientTLS).
	Client *http.Client
	// URL is the receiving shim's API base, e.g. https://10.0.0.2:10250.
	URL string
	// Seal encrypts to the receiver (Recipients: its age recipient) and
	// signs as this node (Signer); both are required.
	Seal seal.WriteOptions
	// wrap, in tests, wraps the stream as sent (a tampered or cut one).
	wrap func(io.Reader) io.Reader
}

// Sent is what Send measured of a transfer the receiver stored.
type Sent struct {
	// Result is the receiver's answer.
	Result
	// Plain is the pod checkpoint's size, Sealed the bytes sent.
	Plain, Sealed int64
	// Duration is from the first byte read to the receiver's answer.
	Duration time.Duration
}

// Send sends the pod checkpoint dir/name to the receiving shim: its
// plain files as one tar, sealed to o.Seal's recipients and signed as
// o.Seal's signer as it is streamed, the signature in the trailer.
// ExpectContinueTimeout is how long a sender's client waits for the
// receiver's 100 Continue before it sends the body anyway (Send asks for
// one): a receiver that refuses answers before it.
const ExpectContinueTimeout = 10 * time.Second

func Send(ctx context.Context, dir, name string, o SendOptions) (Sent, error) {
	var out Sent
	if len(o.Seal.Recipients) == 0 || o.Seal.Signer == nil {
		return out, errdefs.New(errdefs.ErrInvalidArgument, "send a pod checkpoint: a transfer is encrypted to the receiver and signed by this node: recipient or signing key missing")
	}
	if !validName(name) {
		return out, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("send %q: not a pod checkpoint's name", name))
	}
	root, err := os.OpenRoot(filepath.Join(dir, name))
	if err != nil {
		return out, fmt.Errorf("send pod checkpoint: %w", err)
	}
	defer root.Close()
	files, plain, err := listFiles(root)
	if err != nil {
		return out, fmt.Errorf("send pod checkpoint %s: %w", filepath.Join(dir, name), err)
	}
	out.Plain = plain
	start := time.Now()
	pr, pw := io.Pipe()
	var sig *seal.Signature
	var sealed int64
	// Once the request is gone (refused, cut, cancelled), the stream's
	// writes are dropped and the reads of the files stop at the next
	// block: nothing more is read, and the sealing ends without an error
	// of its destination to unwind.
	gone := &dropped{w: pw}
	go func() {
		sw, err := seal.NewWriter(gone, o.Seal)
		if err == nil {
			err = writeTar(sw, root, files, gone)
			if cerr := sw.Close(); err == nil {
				err = cerr
			}
		}
		if err == nil {
			sig, err = sw.Signature()
			sealed = sw.Stored()
		}
		pw.CloseWithError(err)
	}()
	var body io.Reader = pr
	if o.wrap != nil {
		body = o.wrap(body)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, o.URL+Path(name), nil)
	if err != nil {
		pr.CloseWithError(err)
		return out, err
	}
	req.Header.Set(HeaderSize, strconv.FormatInt(plain, 10))
	req.Header.Set("Content-Type", "application/octet-stream")
	// The receiver answers a refusal (an unknown client, a name taken)
	// before the body: with its client's ExpectContinueTimeout set, the
	// body waits for the receiver's 100 Continue, so that a refusal comes
	// back as its status, not as a connection reset by a receiver that
	// closed while the sealed stream was still being written.
	req.Header.Set("Expect", "100-continue")
	req.Trailer = http.Header{HeaderSignature: nil}
	req.ContentLength = -1
	// The signature is known once the sealed stream ends: the trailer is
	// filled when the body reports EOF, before net/http sends it.
	req.Body = &trailing{r: body, done: func() {
		if sig != nil {
			req.Trailer.Set(HeaderSignature, base64.StdEncoding.EncodeToString(sig.Marshal()))
		}
	}, close: func() { pr.Close() }}
	resp, err := o.Client.Do(req)
	if err != nil {
		return out, fmt.Errorf("send %s to %s: %w (%w)", name, o.URL, err, errdefs.ErrUnavailable)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusCreated {
		var e struct{ Error string }
		_ = json.Unmarshal(b, &e)
		return out, &RefusedError{Code: resp.StatusCode, Message: e.Error}
	}
	if err := json.Unmarshal(b, &out.Result); err != nil {
		return out, fmt.Errorf("send %s to %s: the answer: %w", name, o.URL, err)
	}
	out.Sealed, out.Duration = sealed, time.Since(start)
	return out, nil
}

// RefusedError is a receiver's refusal of a transfer.
type RefusedError struct {
	// Code is the HTTP status code, Message the receiver's reason.
	Code    int
	Message string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("transfer refused: %d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
}

// trailing is a request body that calls done when r reports EOF.
type trailing struct {
	r     io.Reader
	done  func()
	close func()
}

func (t *trailing) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err == io.EOF {
		t.done()
	}
	return n, err
}

func (t *trailing) Close() error { t.close(); return nil }

// listFiles returns the regular files of the pod checkpoint root, sorted,
// and their total size; anything else in it is refused.
func listFiles(root *os.Root) ([]fs.FileInfo, int64, error) {
	d, err := root.Open(".")
	if err != nil {
		return nil, 0, err
	}
	defer d.Close()
	ents, err := d.ReadDir(-1)
	if err != nil {
		return nil, 0, err
	}
	var out []fs.FileInfo
	var total int64
	for _, e := range ents {
		if !e.Type().IsRegular() || !plainName(e.Name()) {
			return nil, 0, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("%s is not a plain file", e.Name()))
		}
		fi, err := e.Info()
		if err != nil {
			return nil, 0, err
		}
		out = append(out, fi)
		total += fi.Size()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out, total, nil
}

// dropped writes to w until a write fails, then drops every write; lost
// is set once one failed.
type dropped struct {
	w    io.Writer
	lost atomic.Bool
}

func (d *dropped) Write(p []byte) (int, error) {
	if !d.lost.Load() {
		if _, err := d.w.Write(p); err != nil {
			d.lost.Store(true)
		}
	}
	return len(p), nil
}

// errGone stops the reading of the files once the request is gone.
var errGone = errors.New("the receiver is gone")

// stopping reads r until stop says the stream is lost.
type stopping struct {
	r    io.Reader
	stop *dropped
}

func (s stopping) Read(p []byte) (int, error) {
	if s.stop.lost.Load() {
		return 0, errGone
	}
	return s.r.Read(p)
}

// writeTar writes files of root as a tar to w: names, sizes and mode
// 0600 only; it stops once stop has lost its stream.
func writeTar(w io.Writer, root *os.Root, files []fs.FileInfo, stop *dropped) error {
	tw := tar.NewWriter(w)
	for _, fi := range files {
		f, err := root.Open(fi.Name())
		if err != nil {
			return err
		}
		err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: fi.Name(), Size: fi.Size(), Mode: 0o600, ModTime: fi.ModTime(), Format: tar.FormatPAX})
		if err == nil {
			_, err = io.Copy(tw, io.LimitReader(stopping{r: f, stop: stop}, fi.Size()))
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("send %s: %w", fi.Name(), err)
		}
	}
	return tw.Close()
}

// ClientTLS returns the TLS configuration of a sending node: its own
// certificate and key (the receiver authenticates the node by it) and the
// CA that verifies the receiving shim's certificate.
func ClientTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load node certificate %s and key %s: %w", certFile, keyFile, err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", caFile)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, RootCAs: pool}, nil
}

// contextWithTimeout is r's context bounded by d.
func contextWithTimeout(r *http.Request, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), d)
}
