package fleet

import (
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The benchmark's shape. The defaults are the 1,000-node run of
// BENCHMARKS.md (7-9 minutes on 2 shared cores); -short runs 50 nodes in well
// under a minute, unless the flags say otherwise.
var (
	flagNodes   = flag.Int("fleet.nodes", 1000, "simulated nodes (50 with -short)")
	flagConns   = flag.Int("fleet.conns", 0, "HTTP/2 connections shared by the reporters; one per node when 0")
	flagPoll    = flag.Bool("fleet.poll", false, "reporters read their shims every second instead of long polling")
	flagRamp    = flag.Duration("fleet.ramp", 20*time.Second, "time over which the reporters (and kubelet heartbeats) start")
	flagWarmup  = flag.Duration("fleet.warmup", 15*time.Second, "wait after the start before measuring")
	flagKubelet = flag.Duration("fleet.kubelet", 90*time.Second, "length of the kubelet reference phase")
	flagIdle    = flag.Duration("fleet.idle", 90*time.Second, "length of the idle phase")
	flagLatency = flag.Duration("fleet.latency", 40*time.Second, "length of the latency phase")
	flagRate    = flag.Float64("fleet.change-rate", 10, "condition changes per second in the latency phase")
	flagFlap    = flag.Duration("fleet.flap", 120*time.Second, "length of the flapping phase")
	flagFlapPct = flag.Float64("fleet.flap-fraction", 0.1, "fraction of the nodes that flap")
	flagFlapPer = flag.Duration("fleet.flap-period", 10*time.Second, "how often a flapping node toggles its condition")
)

// shortConfig is the -short shape, for iterating on the harness.
func shortConfig(c Config) Config {
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	short := func(name string, d *time.Duration, v time.Duration) {
		if !set[name] {
			*d = v
		}
	}
	if !set["fleet.nodes"] {
		c.Nodes = 50
	}
	short("fleet.ramp", &c.Ramp, 2*time.Second)
	short("fleet.warmup", &c.Warmup, 3*time.Second)
	short("fleet.kubelet", &c.Kubelet, 10*time.Second)
	short("fleet.idle", &c.Idle, 10*time.Second)
	short("fleet.latency", &c.Latency, 5*time.Second)
	short("fleet.flap", &c.Flap, 10*time.Second)
	return c
}

// BenchmarkFleet runs Run once (its phases are minutes long; b.N does not
// repeat them) and reports each phase.
func BenchmarkFleet(b *testing.B) {
	b.ReportAllocs()
	rep, err := LoadReport("../../kernel/testdata/golden/debian-6.1.json")
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{
		Nodes: *flagNodes, Conns: *flagConns, Poll: *flagPoll, Ramp: *flagRamp, Warmup: *flagWarmup,
		Kubelet: *flagKubelet, Idle: *flagIdle, Latency: *flagLatency, Flap: *flagFlap,
		ChangeRate: *flagRate, FlapFraction: *flagFlapPct, FlapPeriod: *flagFlapPer,
		Report: rep, Logf: b.Logf,
	}
	if testing.Short() {
		cfg = shortConfig(cfg)
	}
	// One run whatever b.N: it takes minutes, so the framework asks for
	// no second one.
	res, err := Run(b, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Log("\n" + Table(res))
	if idle, ok := res.Phase("idle"); ok {
		b.ReportMetric(idle.WritesPerNodeSecond(res.Nodes), "idle-writes/node/s")
	}
	if kl, ok := res.Phase("kubelet"); ok {
		b.ReportMetric(kl.WritesPerNodeSecond(res.Nodes), "kubelet-writes/node/s")
	}
	if lat, ok := res.Phase("latency"); ok && lat.Latency != nil {
		b.ReportMetric(lat.Latency.P99.Seconds(), "change-p99-s")
	}
	if fl, ok := res.Phase("flap"); ok {
		b.ReportMetric(fl.Writes/fl.Seconds, "flap-writes/s")
	}
}

func TestTable(t *testing.T) {
	res := Result{Nodes: 2, Conns: 2, Phases: []Phase{
		{Name: "kubelet", Seconds: 10, Writes: 2, WritesByResource: map[string]float64{"leases": 2}},
		{Name: "latency", Seconds: 10, Writes: 4, WritesByResource: map[string]float64{"leases": 2, "nodes/status": 2},
			Latency: &Latency{Samples: 2, P50: time.Second, P99: 1500 * time.Millisecond, Max: 1500 * time.Millisecond}},
	}}
	got := Table(res)
	for _, want := range []string{"kubelet", "0.100", "leases 0.20/s", "1.00 s", "1.50 s"} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
}

func ExampleFormatRates() {
	fmt.Println(FormatRates(map[string]float64{"nodes/status": 30, "leases": 1000}, 10))
	// Output: leases 100.00/s, nodes/status 3.00/s
}
