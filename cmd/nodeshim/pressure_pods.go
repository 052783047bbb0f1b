package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/runtimes/cri"
	"github.com/nodeshim/nodeshim/shim/pressure"
	"github.com/nodeshim/nodeshim/shim/status"
)

// readPods reads the pods' cgroups under parent, naming them through the
// CRI runtime at endpoint when it is set.
func readPods(ctx context.Context, procRoot, parent, endpoint string) (*status.PodPressures, error) {
	m, err := cgroup.FindMount(procRoot)
	if err != nil {
		return nil, err
	}
	roots := cgroup.PodRoots{V2: m.Path, Parent: parent}
	if m.Mode == cgroup.Hybrid {
		if p, err := cgroup.FindV1Mount(procRoot, "memory"); err == nil {
			roots.MemoryV1 = p
		}
	}
	tree, pods, err := cgroup.ReadPodUsage(roots, cgroup.NewReader())
	if err != nil {
		return nil, err
	}
	var names map[string]cri.PodName
	if endpoint != "" {
		r, err := cri.Dial(endpoint)
		if err != nil {
			return nil, err
		}
		defer r.Close()
		uids := make([]string, 0, len(pods))
		for _, p := range pods {
			uids = append(uids, p.UID)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		names, err = cri.NewPodNamer(r.Client()).Names(rctx, uids)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	return pressure.FromPods(time.Now(), tree, pods, names), nil
}

// podTable is `nodeshim pressure --pods` as a table, in the order of
// pods.Items (most pressured first). A memory figure read from a cgroup v1
// hierarchy says so in the MEM-FROM column; PSI a pod does not have (no
// cgroup v2 directory on a hybrid node) shows as "-".
func podTable(pods *status.PodPressures) string {
	var b strings.Builder
	if pods.Unknown != "" {
		fmt.Fprintf(&b, "pods unknown: %s\n", pods.Unknown)
		return b.String()
	}
	fmt.Fprintf(&b, "kubepods %s (%s), %d pods\n", pods.Kubepods, pods.Driver, len(pods.Items))
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tQOS\tCTRS\tMEM-SOME10\tIO-SOME10\tCPU-SOME10\tWORKING-SET\tLIMIT\tOOM-KILLS\tMEM-FROM")
	for _, p := range pods.Items {
		name := p.UID
		if p.Name != "" {
			name = p.Namespace + "/" + p.Name
		}
		psi := map[string]string{}
		for _, v := range p.PSI {
			psi[v.Resource] = "-"
			if v.Unknown == "" {
				psi[v.Resource] = strconv.FormatFloat(v.Some.Avg10, 'f', 2, 64)
			}
		}
		ws, limit, kills := "?", "?", "?"
		if p.Memory.Unknown == "" {
			ws, kills, limit = bytesString(p.Memory.WorkingSetBytes), strconv.FormatUint(p.Memory.OOMKills, 10), "none"
			if p.Memory.LimitBytes != nil {
				limit = bytesString(*p.Memory.LimitBytes)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, p.QOS, p.Containers,
			psi["memory"], psi["io"], psi["cpu"], ws, limit, kills, p.Memory.Source)
	}
	tw.Flush()
	return b.String()
}

// bytesString prints a byte count in binary units, as kubectl top does.
func bytesString(v uint64) string {
	switch {
	case v >= 1<<30:
		return strconv.FormatFloat(float64(v)/(1<<30), 'f', 1, 64) + "Gi"
	case v >= 1<<20:
		return strconv.FormatFloat(float64(v)/(1<<20), 'f', 1, 64) + "Mi"
	case v >= 1<<10:
		return strconv.FormatFloat(float64(v)/(1<<10), 'f', 1, 64) + "Ki"
	}
	return strconv.FormatUint(v, 10)
}
