package daemon

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/shim/api"
	"github.com/nodeshim/nodeshim/shim/config"
)

// TestLimits: the configuration's API limits win where set, the daemon's
// options where not, the defaults where neither is.
func TestLimits(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts api.Limits
		cfg  config.APILimits
		want func(api.Limits) bool
	}{
		{"defaults", api.Limits{}, config.APILimits{}, func(l api.Limits) bool { return l == api.DefaultLimits() }},
		{"options", api.Limits{ConnsPerPeer: 2, IdleTimeout: time.Second}, config.APILimits{},
			func(l api.Limits) bool {
				return l.ConnsPerPeer == 2 && l.IdleTimeout == time.Second && l.ConnsTCP == api.DefaultConnsTCP
			}},
		{"configuration", api.Limits{ConnsPerPeer: 2, IdleTimeout: time.Second},
			config.APILimits{ConnsPerPeer: 5, ConnsPerAddress: 3, IdleTimeout: metav1.Duration{Duration: time.Minute}},
			func(l api.Limits) bool {
				return l.ConnsPerPeer == 5 && l.ConnsPerAddress == 3 && l.IdleTimeout == time.Minute && l.ReadTimeout == api.DefaultReadTimeout
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Limits(tt.opts, tt.cfg); !tt.want(got) {
				t.Errorf("Limits = %+v", got)
			}
		})
	}
}
