package fleet

import (
	"fmt"
	"strings"
	"text/tabwriter"
)

// Table formats res as a table, one row per phase.
func Table(res Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d nodes, %d connections, %d warnings logged\n", res.Nodes, res.Conns, res.Warnings)
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "phase\tsecs\twrites/s\twrites/node/s\treads/s\tapiserver cores\tetcd cores\tharness cores\tapiserver RSS\tetcd RSS\tevents dropped\tpatch p50\tp99\tchange p50\tp99\tmax\tsamples/missed")
	for _, p := range res.Phases {
		lat := "-\t-\t-\t-"
		if p.Latency != nil {
			l := p.Latency
			lat = fmt.Sprintf("%.2f s\t%.2f s\t%.2f s\t%d/%d", l.P50.Seconds(), l.P99.Seconds(), l.Max.Seconds(), l.Samples, l.Missed)
		}
		patch := "-\t-"
		if p.PatchP50 > 0 {
			patch = fmt.Sprintf("%.3f s\t%.3f s", p.PatchP50.Seconds(), p.PatchP99.Seconds())
		}
		fmt.Fprintf(w, "%s\t%.0f\t%.1f\t%.3f\t%.1f\t%.2f\t%.2f\t%.2f\t%d MiB\t%d MiB\t%.0f\t%s\t%s\n",
			p.Name, p.Seconds, p.Writes/p.Seconds, p.WritesPerNodeSecond(res.Nodes), p.Reads/p.Seconds,
			p.APIServerCPU, p.EtcdCPU, p.HarnessCPU, p.APIServerRSS>>20, p.EtcdRSS>>20, p.EventsDropped, patch, lat)
	}
	w.Flush()
	for _, p := range res.Phases {
		fmt.Fprintf(&b, "%s writes: %s; reads: %s\n", p.Name, FormatRates(p.WritesByResource, p.Seconds), FormatRates(p.ReadsByResource, p.Seconds))
	}
	return b.String()
}
