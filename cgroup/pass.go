package cgroup

import (
	"fmt"
	"time"
)

// PassSource reads figures of every cgroup in a cgroup v2 subtree in one
// kernel pass, instead of one file read per figure and cgroup. The BPF
// cgroup iterator (bpf.CgroupStats, Linux 6.1+) is one.
type PassSource interface {
	// Pass calls fn for dir's cgroup and each cgroup down to depth levels
	// below it, in pre-order; the *PassStats is reused between calls. It
	// returns an error naming dir when the pass cannot run.
	Pass(dir string, depth int, fn func(*PassStats)) error
}

// SetPass makes ReadPodUsage read the pods' PSI and memory counters with
// p, one kernel pass per call, and the files only for what p does not
// read (memory.stat) or when a pass fails; nil reads every file.
func (r *Reader) SetPass(p PassSource) { r.pass = p }

// PassStats is one cgroup's figures from a PassSource.
type PassStats struct {
	// ID is the cgroup id: the inode number of its directory.
	ID uint64
	// Level is the cgroup's depth below the hierarchy's root.
	Level int
	// Pressure is indexed like Resources: what the cgroup's *.pressure
	// files print, with totals as of the kernel's last averaging run (see
	// PSIGroupState.At); each Err wraps ErrMissing where the cgroup has no
	// PSI.
	Pressure [len(Resources)]Pressure
	// Memory has Current, Max and the OOM kills of memory.events (the
	// other fields stay zero); Memory.Err wraps ErrMissing where the
	// memory controller is not enabled in the cgroup.
	Memory  MemoryStats
	OOMKill uint64
}

// PSIStates is the number of PSI states whose figures the *.pressure files
// print: some and full of io, memory and cpu (enum psi_states in
// include/linux/psi_types.h, in this order since 5.13).
const PSIStates = 6

// PSIGroupState is a PSI group as the kernel keeps it (struct psi_group in
// kernel/sched/psi.c): the figures psi_show prints a cgroup's *.pressure
// files from. Its arrays are indexed by the kernel's enum psi_states.
type PSIGroupState struct {
	// Total is the stall time of each state in ns, aggregated by the
	// kernel's last averaging run (total[PSI_AVGS]).
	Total [PSIStates]uint64
	// AvgTotal is the part of Total the averages have taken in.
	AvgTotal [PSIStates]uint64
	// Avg holds the 10 s, 60 s and 300 s running averages of each state,
	// fixed point with 11 fractional bits (FIXED_1).
	Avg [PSIStates][3]uint64
	// AvgLastUpdate and AvgNextUpdate are the last and next averaging
	// times, in ns on sched_clock.
	AvgLastUpdate, AvgNextUpdate uint64
}

// psiSomeState returns the index of r's "some" state in enum psi_states;
// its "full" state is the next.
func psiSomeState(r Resource) int {
	switch r {
	case IO:
		return 0
	case Memory:
		return 2
	}
	return 4
}

// The averages' fixed-point arithmetic (include/linux/sched/loadavg.h and
// kernel/sched/psi.c).
const (
	fshift = 11
	fixed1 = 1 << fshift
	// exp10s, exp60s and exp300s are 1/exp(2s/window) in fixed point.
	exp10s  = 1677
	exp60s  = 1981
	exp300s = 2034
)

// PSIPeriod returns the kernel's PSI averaging period for a kernel built
// with CONFIG_HZ=hz: PSI_FREQ, 2*HZ+1 jiffies, so 2.004 s at HZ=250.
func PSIPeriod(hz int) (time.Duration, error) {
	switch hz {
	case 100, 250, 300, 1000:
		// jiffies_to_nsecs: whole microseconds, times 1000.
		us := int64(2*hz+1) * 1_000_000 / int64(hz)
		return time.Duration(us) * time.Microsecond, nil
	}
	return 0, fmt.Errorf("CONFIG_HZ=%d: not a frequency the kernel can be built with (100, 250, 300 or 1000)", hz)
}

// At returns what psi_show would print for each resource (indexed like
// Resources) when read at now (ns, sched_clock), with period the kernel's
// averaging period (PSIPeriod). Where an averaging run is due, it applies
// the kernel's update_averages to a copy: the averages of a group that went
// idle decay for the periods missed since its last run, as they do when
// its file is read. Totals are g.Total: psi_show would add the stall time
// the per-CPU state gathered since the last averaging run, at most one
// period's worth, which a reader outside the kernel cannot see.
func (g PSIGroupState) At(now uint64, period time.Duration) [len(Resources)]PSI {
	if p := uint64(period); p > 0 && now >= g.AvgNextUpdate {
		g.updateAverages(now, p)
	}
	var out [len(Resources)]PSI
	for i, r := range Resources {
		s := psiSomeState(r)
		out[i] = PSI{Some: g.line(s), Full: g.line(s + 1), HasFull: true}
	}
	return out
}

func (g *PSIGroupState) line(s int) PSILine {
	return PSILine{Avg10: loadAvg(g.Avg[s][0]), Avg60: loadAvg(g.Avg[s][1]), Avg300: loadAvg(g.Avg[s][2]), Total: g.Total[s] / 1000}
}

// loadAvg is psi_show's "%lu.%02lu" of LOAD_INT and LOAD_FRAC.
func loadAvg(x uint64) Avg {
	return Avg((x>>fshift)*100 + ((x&(fixed1-1))*100)>>fshift)
}

// updateAverages is kernel/sched/psi.c's update_averages.
func (g *PSIGroupState) updateAverages(now, period uint64) {
	expires := g.AvgNextUpdate
	var missed uint64
	if now-expires >= period {
		missed = (now - expires) / period
	}
	g.AvgNextUpdate = expires + (1+missed)*period
	elapsed := now - (g.AvgLastUpdate + missed*period)
	g.AvgLastUpdate = now
	for s := range g.Avg {
		sample := g.Total[s] - g.AvgTotal[s]
		if sample > elapsed {
			sample = elapsed
		}
		g.AvgTotal[s] += sample
		calcAvgs(&g.Avg[s], missed, sample, elapsed)
	}
}

// calcAvgs is kernel/sched/psi.c's calc_avgs.
func calcAvgs(avg *[3]uint64, missed, sample, period uint64) {
	exps := [3]uint64{exp10s, exp60s, exp300s}
	if missed > 0 {
		for w, e := range exps {
			avg[w] = calcLoad(avg[w], fixedPowerInt(e, fshift, missed), 0)
		}
	}
	var pct uint64
	if period > 0 {
		pct = sample * 100 / period
	}
	pct *= fixed1
	for w, e := range exps {
		avg[w] = calcLoad(avg[w], e, pct)
	}
}

// calcLoad is include/linux/sched/loadavg.h's calc_load.
func calcLoad(load, exp, active uint64) uint64 {
	n := load*exp + active*(fixed1-exp)
	if active >= load {
		n += fixed1 - 1
	}
	return n / fixed1
}

// fixedPowerInt is kernel/sched/loadavg.c's fixed_power_int: x**n in fixed
// point with fracBits fractional bits.
func fixedPowerInt(x uint64, fracBits uint, n uint64) uint64 {
	result := uint64(1) << fracBits
	for n > 0 {
		if n&1 != 0 {
			result = (result*x + 1<<(fracBits-1)) >> fracBits
		}
		n >>= 1
		if n == 0 {
			break
		}
		x = (x*x + 1<<(fracBits-1)) >> fracBits
	}
	return result
}
