package checkpointtest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/shim/checkpoint"
)

// TestFake: each container name answers with its error class, as the
// service would, and the timeouts are recorded in order.
func TestFake(t *testing.T) {
	tests := []struct {
		container string
		want      []error
	}{
		{"app", nil},
		{"disabled", []error{checkpoint.ErrDisabled, errdefs.ErrNotFound}},
		{"missing", []error{checkpoint.ErrNotFound}},
		{"no-room", []error{checkpoint.ErrNoRoom, errdefs.ErrUnavailable}},
		{"busy", []error{checkpoint.ErrBusy, errdefs.ErrBusy}},
		{"broken", nil},
	}
	var f Fake
	var timeouts []time.Duration
	for i, tt := range tests {
		t.Run(tt.container, func(t *testing.T) {
			timeout := time.Duration(i+1) * time.Second
			timeouts = append(timeouts, timeout)
			res, err := f.Checkpoint(context.Background(), criu.ContainerRef{Namespace: "default", Pod: "web-0", Container: tt.container}, timeout)
			switch {
			case tt.container == "app":
				if err != nil || res.Path != ArchivePath("default", "web-0") {
					t.Errorf("app: %+v, %v", res, err)
				}
			case tt.want == nil:
				if err == nil || errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrBusy) || errors.Is(err, errdefs.ErrUnavailable) {
					t.Errorf("%s: %v, want an unclassified failure", tt.container, err)
				}
			}
			for _, class := range tt.want {
				if !errors.Is(err, class) {
					t.Errorf("%s: %v, want %v", tt.container, err, class)
				}
			}
		})
	}
	if got := f.Timeouts(); !slices.Equal(got, timeouts) {
		t.Errorf("timeouts %v, want %v", got, timeouts)
	}
	f.Reset()
	if got := f.Timeouts(); len(got) != 0 {
		t.Errorf("after Reset: %v", got)
	}
}
