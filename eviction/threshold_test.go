package eviction

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/internal/errdefs"
)

func TestParseThresholds(t *testing.T) {
	cases := []struct {
		name, in string
		want     []string // String() of each threshold
		wantErr  string
	}{
		{"kubelet defaults", DefaultHardThresholds, []string{"memory.available<100Mi", "nodefs.available<10%", "nodefs.inodesFree<5%", "imagefs.available<15%", "imagefs.inodesFree<5%"}, ""},
		{"pid and allocatable", "pid.available<5%, allocatableMemory.available<1Gi", []string{"pid.available<5%", "allocatableMemory.available<1Gi"}, ""},
		{"zero disables", "memory.available<0,nodefs.available<0%", nil, ""},
		{"empty", "", nil, ""},
		{"unknown signal", "memory.free<1Gi", nil, `unknown signal "memory.free"`},
		{"wrong operator", "memory.available>1Gi", nil, "want SIGNAL<VALUE"},
		{"two operators", "memory.available<=1Gi", nil, `only the "<" operator`},
		{"bad quantity", "memory.available<lots", nil, "quantities must match"},
		{"negative", "memory.available<-1Gi", nil, "must not be negative"},
		{"over 100%", "nodefs.available<101%", nil, "must be within"},
		{"bad percent", "nodefs.available<x%", nil, "bad percentage"},
		{"repeated", "memory.available<1Gi,memory.available<2Gi", nil, "given twice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseThresholds(tc.in)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrThreshold) || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrThreshold (invalid argument) containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var s []string
			for _, th := range got {
				s = append(s, th.String())
			}
			if fmt.Sprint(s) != fmt.Sprint(tc.want) {
				t.Fatalf("got %v, want %v", s, tc.want)
			}
		})
	}
}

func TestThresholdCrossed(t *testing.T) {
	ths, _ := ParseThresholds("memory.available<100Mi,nodefs.available<10%")
	mem, fs := ths[0], ths[1]
	cases := []struct {
		name string
		th   Threshold
		obs  cgroup.Observation
		want bool
	}{
		{"memory under", mem, cgroup.Observation{Available: 99 << 20, Capacity: 1 << 30}, true},
		{"memory at", mem, cgroup.Observation{Available: 100 << 20, Capacity: 1 << 30}, false},
		{"percent under", fs, cgroup.Observation{Available: 99, Capacity: 1000}, true},
		{"percent at", fs, cgroup.Observation{Available: 100, Capacity: 1000}, false},
		{"unknown never crosses", mem, cgroup.Observation{Err: cgroup.ErrMissing}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.th.Crossed(tc.obs); got != tc.want {
				t.Fatalf("Crossed = %v, want %v", got, tc.want)
			}
		})
	}
}
