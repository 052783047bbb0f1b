package eviction

import (
	"errors"
	"testing"
)

func FuzzParseThresholds(f *testing.F) {
	f.Add(DefaultHardThresholds)
	f.Add("pid.available<5%")
	f.Add("memory.available<1e3")
	f.Fuzz(func(t *testing.T, s string) {
		ths, err := ParseThresholds(s)
		if err != nil {
			if !errors.Is(err, ErrThreshold) {
				t.Fatalf("error %v does not wrap ErrThreshold", err)
			}
			return
		}
		for _, th := range ths {
			if (th.Quantity == nil) == (th.Percentage == 0) || th.Percentage < 0 || th.Percentage > 1 {
				t.Fatalf("threshold %+v", th)
			}
			if _, err := ParseThresholds(th.String()); err != nil {
				t.Fatalf("%q does not parse back: %v", th.String(), err)
			}
		}
	})
}
