package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodeshim/nodeshim/shim/condition"
	"github.com/nodeshim/nodeshim/shim/config"
	"github.com/nodeshim/nodeshim/shim/status"
)

func TestCollector(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	m := status.New(clk)
	clk.Step(time.Minute)
	m.Set(condition.Condition{Type: "NetworkReady", Status: condition.False, Severity: condition.SeverityError, Reason: "NoDefaultRoute"})
	ref := &config.SourceRef{UID: "abc", AssignedAt: metav1.NewTime(clk.Now())}
	cfg := config.NodeConfigStatus{Assigned: &config.SourceRef{UID: "def"}, Active: ref, LastKnownGood: ref, Error: "rolled back"}

	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewCollector(m, func() config.NodeConfigStatus { return cfg })); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP nodeshim_condition Node condition by type and status: 1 for the current status, 0 for the two others (as kube_node_status_condition).
# TYPE nodeshim_condition gauge
nodeshim_condition{status="False",type="NetworkReady"} 1
nodeshim_condition{status="False",type="Ready"} 1
nodeshim_condition{status="True",type="NetworkReady"} 0
nodeshim_condition{status="True",type="Ready"} 0
nodeshim_condition{status="Unknown",type="NetworkReady"} 0
nodeshim_condition{status="Unknown",type="Ready"} 0
# HELP nodeshim_condition_last_transition_timestamp_seconds When the condition last changed status, in seconds since the epoch.
# TYPE nodeshim_condition_last_transition_timestamp_seconds gauge
nodeshim_condition_last_transition_timestamp_seconds{type="NetworkReady"} 1.80000006e+09
nodeshim_condition_last_transition_timestamp_seconds{type="Ready"} 1.80000006e+09
# HELP nodeshim_config_error 1 while the configuration lifecycle reports an error (a rollback or a source error).
# TYPE nodeshim_config_error gauge
nodeshim_config_error 1
# HELP nodeshim_config_source_info Configuration payloads by role (assigned, active, last_known_good); uid "" is the local defaults.
# TYPE nodeshim_config_source_info gauge
nodeshim_config_source_info{role="active",uid="abc"} 1
nodeshim_config_source_info{role="assigned",uid="def"} 1
nodeshim_config_source_info{role="last_known_good",uid="abc"} 1
# HELP nodeshim_status_generation Generation of the node status: the number of visible changes since start.
# TYPE nodeshim_status_generation gauge
nodeshim_status_generation 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndLint(reg); err != nil || len(n) != 0 {
		t.Errorf("lint: %v %v", n, err)
	}
}
