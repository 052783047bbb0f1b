package api

import (
	"log/slog"
	"sync"
	"time"
)

// DefaultRefusalLogInterval is the least time between two log lines about
// the refusals of one peer.
const DefaultRefusalLogInterval = time.Minute

// maxRefusalPeers bounds the peers a RefusalLog tracks one by one; beyond
// it (a user with a range of subordinate uids), the refusals of new peers
// are counted together under otherPeers.
const maxRefusalPeers = 1024

// otherPeers is the key of the refusals counted together.
const otherPeers = "other peers"

// RefusalLog logs the API's refusals (401, 403, a connection over its
// peer's limit) at most once per interval and peer, with the number of
// refusals since the previous line, so that a peer that is refused in a
// loop cannot flood the log. It is safe for concurrent use.
type RefusalLog struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	mu    sync.Mutex
	peers map[string]*refusals
}

// refusals are one peer's refusals since its last log line.
type refusals struct {
	logged  time.Time // when the last line was written
	pending int       // refusals since, not logged yet
}

// NewRefusalLog returns a RefusalLog writing to log (slog.Default() when
// nil) at most once per every (DefaultRefusalLogInterval when not
// positive) and peer, reading the time from now (time.Now when nil).
func NewRefusalLog(log *slog.Logger, every time.Duration, now func() time.Time) *RefusalLog {
	if log == nil {
		log = slog.Default()
	}
	if every <= 0 {
		every = DefaultRefusalLogInterval
	}
	if now == nil {
		now = time.Now
	}
	return &RefusalLog{log: log, every: every, now: now, peers: make(map[string]*refusals)}
}

// Refused counts a refusal of peer (a key such as "uid=1000") and logs msg
// with attrs, the peer and "refused", the number of refusals since the
// peer's previous line (this one included), unless a line about the peer
// was written less than the interval ago.
func (l *RefusalLog) Refused(peer, msg string, attrs ...any) {
	now := l.now()
	l.mu.Lock()
	r, ok := l.peers[peer]
	if !ok {
		if len(l.peers) >= maxRefusalPeers {
			l.pruneLocked(now)
		}
		if len(l.peers) >= maxRefusalPeers {
			peer = otherPeers
			r = l.peers[peer]
		}
		if r == nil {
			r = &refusals{}
			l.peers[peer] = r
		}
	}
	r.pending++
	if !r.logged.IsZero() && now.Sub(r.logged) < l.every {
		l.mu.Unlock()
		return
	}
	n := r.pending
	r.logged, r.pending = now, 0
	l.mu.Unlock()
	l.log.Warn(msg, append(attrs, "peer", peer, "refused", n, "interval", l.every.String())...)
}

// pruneLocked forgets the peers whose last line is older than the
// interval: their next refusal is logged at once anyway. What they had
// pending is carried over to the count of the other peers.
func (l *RefusalLog) pruneLocked(now time.Time) {
	var carried int
	for k, r := range l.peers {
		if k != otherPeers && now.Sub(r.logged) >= l.every {
			carried += r.pending
			delete(l.peers, k)
		}
	}
	if carried > 0 {
		o := l.peers[otherPeers]
		if o == nil {
			o = &refusals{}
			l.peers[otherPeers] = o
		}
		o.pending += carried
	}
}
