package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

func TestPressureCommand(t *testing.T) {
	testutil.RequireRoot(t)
	out, _, err := runSplit(t, "pressure", "-o", "json", "--kubelet-root-dir", "/var/lib", "--eviction-hard", "memory.available<1Mi,pid.available<1%")
	if err != nil {
		t.Fatalf("pressure: %v\n%s", err, out)
	}
	var v struct {
		Mount      struct{ Path, Mode string }
		Watchers   []struct{ Path, Mode string }
		Conditions []struct{ Type, Status, Message string }
		PSIViews   []struct{ Type, Status string }
		Signals    map[string]struct{ Available, Capacity uint64 }
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("decode: %v\n%s", err, out)
	}
	requireCamelCase(t, []byte(out))
	if v.Mount.Path == "" || len(v.Watchers) == 0 || len(v.Conditions) != 3 || len(v.PSIViews) != 2 {
		t.Fatalf("incomplete output: %+v", v)
	}
	for _, c := range v.Conditions {
		// 1Mi of memory, 1% of pids, the default disk thresholds: an idle
		// build machine is under none of them.
		if c.Status != "False" {
			t.Errorf("%s = %s: %s", c.Type, c.Status, c.Message)
		}
	}
	if s := v.Signals["memory.available"]; s.Available == 0 || s.Capacity == 0 {
		t.Errorf("memory.available %+v", s)
	}
}

func TestPressureCommandRejectsBadThreshold(t *testing.T) {
	_, err := run(t, "pressure", "--eviction-hard", "memory.available>1Gi")
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitUsage || !strings.Contains(err.Error(), "invalid eviction threshold") {
		t.Fatalf("err = %v, want a usage error", err)
	}
}
