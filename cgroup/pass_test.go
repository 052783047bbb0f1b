package cgroup

import (
	"testing"
	"time"
)

func TestPSIPeriod(t *testing.T) {
	for _, tc := range []struct {
		hz   int
		want time.Duration
		ok   bool
	}{
		{100, 2010 * time.Millisecond, true},
		{250, 2004 * time.Millisecond, true},
		{300, 2003333 * time.Microsecond, true},
		{1000, 2001 * time.Millisecond, true},
		{0, 0, false},
		{200, 0, false},
	} {
		got, err := PSIPeriod(tc.hz)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("PSIPeriod(%d) = %v, %v; want %v, ok %v", tc.hz, got, err, tc.want, tc.ok)
		}
	}
}

// TestPSIGroupStateAt checks the emulation of psi_show's averaging. The
// first case is a group state read from a 6.18 kernel (HZ=250) with its
// cpu.pressure file read right after: the group went idle and its
// averaging stopped two periods before the read. The others are computed
// by hand with the kernel's calc_load: 38905 * 1677 / 2048 = 31857 (15.55);
// with 25% stall, (38905 * 1677 + 51200 * 371 + 2047) / 2048 = 41133
// (20.08).
func TestPSIGroupStateAt(t *testing.T) {
	period, _ := PSIPeriod(250)
	idle := PSIGroupState{AvgLastUpdate: 44277330938316, AvgNextUpdate: 44279326852968}
	idle.Total[4], idle.AvgTotal[4] = 2964330003, 2964330003
	idle.Avg[4][0] = 38905
	busy := idle
	busy.Total[4] += 500_000_000 // stalled 0.5 s since the last averaging

	for _, tc := range []struct {
		name  string
		g     PSIGroupState
		now   uint64
		want  PSILine
		other PSILine // cpu full
	}{
		{"idle, read 2 periods late (file: 10.42)", idle, 44284346268110,
			PSILine{Avg10: 1042, Total: 2964330}, PSILine{}},
		{"before the next averaging: the kernel's figures as they are", idle, 44279326852967,
			PSILine{Avg10: 1899, Total: 2964330}, PSILine{}},
		{"due, no period missed, no stall: one period of decay", idle, 44279326852968,
			PSILine{Avg10: 1555, Total: 2964330}, PSILine{}},
		{"due with 0.5 s of stall in the ~2 s since the last run", busy, 44279330938316,
			PSILine{Avg10: 2008, Avg60: 81, Avg300: 17, Total: 3464330}, PSILine{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.g.At(tc.now, period)
			if got[0].Some != tc.want || !got[0].HasFull {
				t.Errorf("cpu some = %+v, want %+v", got[0].Some, tc.want)
			}
			if got[0].Full != tc.other {
				t.Errorf("cpu full = %+v, want %+v", got[0].Full, tc.other)
			}
			for _, i := range []int{1, 2} {
				if got[i] != (PSI{HasFull: true}) {
					t.Errorf("%s = %+v, want zero", Resources[i], got[i])
				}
			}
		})
	}
	// At works on a copy.
	before := idle
	idle.At(44284346268110, period)
	if idle != before {
		t.Error("At changed the group state")
	}
}

func TestLoadAvg(t *testing.T) {
	// psi_show prints LOAD_INT and LOAD_FRAC: 18550 is 9.05 (a 6.18
	// cpu.pressure read), FIXED_1 is 1.00, 100 * FIXED_1 is 100.00.
	for in, want := range map[uint64]Avg{0: 0, 18550: 905, 38905: 1899, fixed1: 100, 100 * fixed1: 10000, fixed1 - 1: 99} {
		if got := loadAvg(in); got != want {
			t.Errorf("loadAvg(%d) = %v, want %v", in, got, want)
		}
	}
}

func TestFixedPowerInt(t *testing.T) {
	// fixed_power_int(x, 11, 0) is 1.0; to the first power it is x.
	for _, tc := range []struct{ x, n, want uint64 }{
		{exp10s, 0, fixed1},
		{exp10s, 1, exp10s},
		{exp10s, 2, (exp10s*exp10s + 1024) >> 11},
		// 300 s of 2 s periods: e^-1 would be 753/2048; the kernel's
		// rounding at each squaring gives 727 (checked against a
		// transliteration of the C).
		{exp300s, 150, 727},
	} {
		if got := fixedPowerInt(tc.x, fshift, tc.n); got != tc.want {
			t.Errorf("fixedPowerInt(%d, 11, %d) = %d, want %d", tc.x, tc.n, got, tc.want)
		}
	}
}
