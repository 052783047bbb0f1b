package transfer

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"time"

	"filippo.io/age"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodeshim/nodeshim/criu/archive/seal"
	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// SendPattern is the route by which a node's own callers (root, the
// reporter) have its shim send one of its pod checkpoints.
const SendPattern = "POST /transfers/{name}/send"

// SendRequest is the body of SendPattern: where to send.
type SendRequest struct {
	// Node is the target node: its certificate must name it.
	Node string `json:"node"`
	// URL is the target shim's API base (https).
	URL string `json:"url"`
	// Recipient is the target's age recipient; it must be one of this
	// node's configured recipients (checkpoint.encryption.recipients).
	Recipient string `json:"recipient"`
}

// SenderOptions are a node's means to send: its checkpoint directory, its
// certificate and key (the receiver authenticates the node by them), the
// CA that verifies receivers, its signer, and the only recipients it may
// encrypt to.
type SenderOptions struct {
	Dir                       string
	CertFile, KeyFile, CAFile string
	Signer                    *seal.Signer
	Recipients                []age.Recipient
	// Timeout bounds one send; DefaultTimeout when zero.
	Timeout time.Duration
}

// ErrSendNotEnabled is returned by a SendHandler's load when this node
// sends no transfers: the route answers 404.
var ErrSendNotEnabled = errdefs.New(errdefs.ErrNotFound, "this node sends no transfers (checkpoint.transfer.send)")

// maxSendRequest bounds SendPattern's body.
const maxSendRequest = 64 << 10

// SendHandler serves SendPattern with the options load returns at each
// request: 200 with a Sent once the target stored the pod checkpoint;
// 400 for a request this node refuses (a recipient it is not configured
// to encrypt to, a node name or URL out of grammar), 404 when it sends
// none, 502 with the target's refusal or a certificate that does not name
// the target node.
func SendHandler(load func() (SenderOptions, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o, err := load()
		if err != nil {
			code := http.StatusServiceUnavailable
			if errors.Is(err, errdefs.ErrNotFound) {
				code = http.StatusNotFound
			}
			writeJSON(w, code, map[string]string{"error": err.Error()})
			return
		}
		var req SendRequest
		dec := json.NewDecoder(io.LimitReader(r.Body, maxSendRequest))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("send request: %v", err)})
			return
		}
		so, err := o.sendOptions(req)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		defer so.Client.CloseIdleConnections()
		timeout := o.Timeout
		if timeout <= 0 {
			timeout = DefaultTimeout
		}
		ctx, cancel := contextWithTimeout(r, timeout)
		defer cancel()
		sent, err := Send(ctx, o.Dir, r.PathValue("name"), so)
		switch {
		case err == nil:
			writeJSON(w, http.StatusOK, sent)
		case errors.Is(err, errdefs.ErrInvalidArgument):
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		default:
			writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		}
	})
}

// sendOptions checks req against o and returns the options of Send: a
// client that presents this node's certificate and accepts only a
// receiver whose certificate, from o's CA, names req.Node.
func (o SenderOptions) sendOptions(req SendRequest) (SendOptions, error) {
	var so SendOptions
	if errs := validation.IsDNS1123Subdomain(req.Node); len(errs) > 0 {
		return so, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("node %q: %v", req.Node, errs))
	}
	u, err := url.Parse(req.URL)
	if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return so, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("url %q: want https://host:port", req.URL))
	}
	rec, err := age.ParseX25519Recipient(req.Recipient)
	if err != nil {
		return so, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("recipient: %v", err))
	}
	if !slices.ContainsFunc(o.Recipients, func(r age.Recipient) bool {
		x, ok := r.(*age.X25519Recipient)
		return ok && x.String() == rec.String()
	}) {
		return so, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("recipient %s is not among this node's checkpoint.encryption.recipients: a pod checkpoint is sent only to a key the node is configured to encrypt to", rec))
	}
	if o.Signer == nil {
		return so, errdefs.New(errdefs.ErrInvalidArgument, "no signing key (checkpoint.signing.keyFile)")
	}
	cfg, err := ClientTLS(o.CertFile, o.KeyFile, o.CAFile)
	if err != nil {
		return so, err
	}
	node := req.Node
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		// The chain is verified against the CA by then; the leaf must
		// be the target node's own.
		if len(cs.PeerCertificates) == 0 || NodeOf(cs.PeerCertificates[0].Subject.CommonName) != node {
			return fmt.Errorf("the receiver's certificate names %q, not node %s", commonName(cs.PeerCertificates), node)
		}
		return nil
	}
	so.Client = &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, ExpectContinueTimeout: ExpectContinueTimeout}}
	so.URL = u.Scheme + "://" + u.Host
	so.Seal = seal.WriteOptions{Recipients: []age.Recipient{rec}, Signer: o.Signer}
	return so, nil
}

func commonName(certs []*x509.Certificate) string {
	if len(certs) == 0 {
		return ""
	}
	return certs[0].Subject.CommonName
}
