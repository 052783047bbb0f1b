package condition

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkSummarize computes Ready from 20 conditions, a few abnormal,
// beside the baseline of only scanning them for the first abnormal one.
func BenchmarkSummarize(b *testing.B) {
	var conds []Condition
	for i := 0; i < 20; i++ {
		c := Condition{Type: fmt.Sprintf("Cond%dReady", i), Status: True, Reason: "Fine"}
		switch i % 7 {
		case 3:
			c.Status, c.Severity, c.Message = False, SeverityWarning, "degraded"
		case 5:
			c.Status, c.Message = Unknown, "not probed"
		}
		conds = append(conds, c)
	}
	b.Run("summarize-20", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = Summarize(TypeReady, 1, conds)
		}
	})
	b.Run("baseline-first-abnormal-20", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, c := range conds {
				if !c.Normal() {
					break
				}
			}
		}
	})
	b.Run("set-update-unchanged", func(b *testing.B) {
		var s Set
		now := time.Now()
		for _, c := range conds {
			s.Update(c, now)
		}
		b.ReportAllocs()
		for b.Loop() {
			s.Update(conds[19], now)
		}
	})
}
