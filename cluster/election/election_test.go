package election

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// noLeases is a Lease client New never calls.
type noLeases struct{}

func (noLeases) GetLease(context.Context, string, string) (*coordinationv1.Lease, error) {
	panic("not called")
}

func (noLeases) CreateLease(context.Context, *coordinationv1.Lease, string) (*coordinationv1.Lease, error) {
	panic("not called")
}

func (noLeases) UpdateLease(context.Context, *coordinationv1.Lease, string) (*coordinationv1.Lease, error) {
	panic("not called")
}

func TestNewChecksConfig(t *testing.T) {
	good := Config{Leases: noLeases{}, Namespace: "ns", Name: "n", Identity: "a",
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
	for _, tc := range []struct {
		name   string
		change func(*Config)
		err    string // empty: valid
	}{
		{"client-go's defaults", func(*Config) {}, ""},
		{"no client", func(c *Config) { c.Leases = nil }, "no Lease client"},
		{"no name", func(c *Config) { c.Name = "" }, "no namespace or name"},
		{"no identity", func(c *Config) { c.Identity = "" }, "no identity"},
		{"sub-second lease", func(c *Config) { c.LeaseDuration = 500 * time.Millisecond }, "under a second"},
		{"lease within renew deadline", func(c *Config) { c.LeaseDuration = c.RenewDeadline }, "greater than the renew deadline"},
		{"renew deadline within retries", func(c *Config) { c.RetryPeriod = 9 * time.Second }, "times the retry period"},
		{"no retry period", func(c *Config) { c.RetryPeriod = 0 }, "times the retry period"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.change(&cfg)
			_, err := New(cfg)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("New = %v, want error containing %q", err, tc.err)
			}
		})
	}
}
