package api

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/internal/syncbuf"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// TestRefusalLog checks that a peer refused in a loop makes one line per
// interval, carrying the number of refusals since its previous line.
func TestRefusalLog(t *testing.T) {
	type step struct {
		advance time.Duration
		peer    string
		times   int
	}
	tests := []struct {
		name  string
		steps []step
		want  []string // "peer refused=N" of each line, in order
	}{
		{"a flood is one line", []step{{0, "uid=1000", 500}}, []string{"uid=1000 refused=1"}},
		{"the next interval carries the count", []step{{0, "uid=1000", 500}, {time.Minute, "uid=1000", 1}},
			[]string{"uid=1000 refused=1", "uid=1000 refused=500"}},
		{"within the interval nothing more", []step{{0, "uid=1000", 3}, {59 * time.Second, "uid=1000", 3}},
			[]string{"uid=1000 refused=1"}},
		{"peers are counted apart", []step{{0, "uid=1000", 10}, {0, "uid=1001", 10}},
			[]string{"uid=1000 refused=1", "uid=1001 refused=1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			buf := &syncbuf.Buffer{}
			clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
			l := NewRefusalLog(slog.New(slog.NewTextHandler(buf, nil)), time.Minute, clock.now)
			for _, s := range tt.steps {
				clock.advance(s.advance)
				for range s.times {
					l.Refused(s.peer, "API request refused", "path", "/status")
				}
			}
			got := refusalLines(buf.String())
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestRefusalLogBoundsPeers checks that a flood of distinct peers (a
// range of subordinate uids) neither grows the log state without bound
// nor writes more than one line per tracked peer and interval.
func TestRefusalLogBoundsPeers(t *testing.T) {
	buf := &syncbuf.Buffer{}
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	l := NewRefusalLog(slog.New(slog.NewTextHandler(buf, nil)), time.Minute, clock.now)
	const peers = 3 * maxRefusalPeers
	for i := range peers {
		for range 3 {
			l.Refused(fmt.Sprintf("uid=%d", 100000+i), "API request refused")
		}
	}
	if n := len(l.peers); n > maxRefusalPeers+1 {
		t.Errorf("%d peers tracked, want at most %d", n, maxRefusalPeers+1)
	}
	lines := refusalLines(buf.String())
	if len(lines) != maxRefusalPeers+1 {
		t.Errorf("%d lines for %d peers, want %d (one per tracked peer and one for the others)", len(lines), peers, maxRefusalPeers+1)
	}
	// Once the interval is over, the idle peers are forgotten and new
	// ones are tracked again.
	clock.advance(time.Minute)
	l.Refused("uid=1", "API request refused")
	if _, ok := l.peers["uid=1"]; !ok {
		t.Error("a new peer after the interval is not tracked by itself")
	}
}

// refusalLines returns "peer refused=N" for each line of a text log.
func refusalLines(log string) []string {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		if line == "" {
			continue
		}
		var peer, n string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "peer="); ok {
				peer = strings.Trim(v, `"`)
			}
			if v, ok := strings.CutPrefix(f, "refused="); ok {
				n = v
			}
		}
		out = append(out, peer+" refused="+n)
	}
	return out
}
