package command

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/cluster/reporter"
)

func TestReady(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name string
		s    reporter.State
		want string
	}{
		{"nothing yet", reporter.State{}, "not published and the Lease not renewed"},
		{"lease only", reporter.State{LastRenew: now}, "status is not published"},
		{"status only", reporter.State{LastPublish: now}, "Lease is not renewed"},
		{"both", reporter.State{LastPublish: now, LastRenew: now}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Ready(tc.s)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Ready = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestFlags(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	t.Setenv("POD_NAMESPACE", "")
	var c Config
	fs := flag.NewFlagSet("reporter", flag.ContinueOnError)
	c.AddFlags(fs)
	if err := c.Check(); err == nil || !strings.Contains(err.Error(), "--node-name") {
		t.Errorf("Check without a node name = %v, want it named", err)
	}
	if err := fs.Parse([]string{"--node-name", "n1", "--namespace", "ns", "--poll-interval", "3s", "--socket", "/run/s.sock"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Check(); err != nil {
		t.Errorf("Check = %v", err)
	}
	if c.Options.NodeName != "n1" || c.Options.Namespace != "ns" || c.Options.PollInterval != 3*time.Second ||
		c.Socket != "/run/s.sock" || c.MetricsAddr != ":9808" || c.Options.ResyncPeriod != reporter.DefaultResyncPeriod {
		t.Errorf("parsed %+v", c)
	}
}
