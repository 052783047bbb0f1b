package transfer

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"filippo.io/age"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// InfoPattern is the route by which a node's own callers (the reporter,
// which publishes it on the Node) learn what another node's shim needs to
// send this node a pod checkpoint.
const InfoPattern = "GET /transfers"

// Info is what a sender needs of a receiving node beyond its name: the
// port of its shim's TLS listener (the host is the Node's address) and
// the age recipients of its identities, to one of which a pod checkpoint
// sent here is encrypted. Both are public.
type Info struct {
	Port       int      `json:"port"`
	Recipients []string `json:"recipients"`
}

// NewInfo returns the Info of a node whose shim listens on tcpAddress
// (host:port) and decrypts with identities; only X25519 identities have
// a recipient to publish.
func NewInfo(tcpAddress string, identities []age.Identity) (Info, error) {
	_, p, err := net.SplitHostPort(tcpAddress)
	if err != nil {
		return Info{}, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("api.tcpAddress %q: %v", tcpAddress, err))
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 {
		return Info{}, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("api.tcpAddress %q: port %q is not a port number", tcpAddress, p))
	}
	in := Info{Port: port}
	for _, id := range identities {
		if x, ok := id.(*age.X25519Identity); ok {
			in.Recipients = append(in.Recipients, x.Recipient().String())
		}
	}
	if len(in.Recipients) == 0 {
		return Info{}, errdefs.New(errdefs.ErrInvalidArgument, "checkpoint.encryption.identities hold no X25519 identity: no sender could encrypt to this node")
	}
	return in, nil
}

// InfoHandler serves InfoPattern with the Info load returns at each
// request: 404 when this node receives no transfers, 503 when its
// configuration cannot say.
func InfoHandler(load func() (Info, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, err := load()
		switch {
		case errors.Is(err, errdefs.ErrNotFound):
			writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
		case err != nil:
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		default:
			writeJSON(w, http.StatusOK, in)
		}
	})
}
