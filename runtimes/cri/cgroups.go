package cri

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/cgroup"
	"golang.org/x/sys/unix"
)

// LabelPodUID is the pod UID label kubelet puts on every container.
const LabelPodUID = "io.kubernetes.pod.uid"

// Workload is a CRI container by its Kubernetes names and its cgroup.
type Workload struct {
	Namespace, Pod, PodUID, Container string
	ContainerID, PodSandboxID         string
	// CgroupsPath is the container's cgroup as its OCI spec names it
	// (linux.cgroupsPath): a path below each hierarchy's root with the
	// cgroupfs driver, "slice:prefix:name" with the systemd driver.
	CgroupsPath string
}

// Victim is what an OOM event tells of the task the kernel killed.
type Victim struct {
	// CgroupID is the victim's cgroup v2 id, 0 when unknown.
	CgroupID uint64
	// Cgroups are the paths of the victim's /proc/<pid>/cgroup lines, read
	// as soon as the event arrived; nil when the task was already gone.
	Cgroups []string
	// CgroupNames are the names of the victim's cgroup v2 directory and
	// of its parent, as the kernel named them at the kill (the OOM
	// event's); nil when the event has none. They outlive the
	// directory, which a kill of the whole container removes.
	CgroupNames []string
	// Time is when the kernel killed it; zero when unknown.
	Time time.Time
}

// How a victim's container was found.
const (
	ByCgroupID   = "cgroupID"
	ByProcCgroup = "procCgroup"
	ByOOMControl = "memory.oom_control"
	// ByCgroupName: the container whose id the victim's cgroup directory
	// is named for ("cri-containerd-<id>.scope", "crio-<id>.scope" with
	// the systemd driver, "<id>" with cgroupfs), as the kernel named it
	// at the kill.
	ByCgroupName = "cgroupName"
	// ByExitReason: the one container that the runtime reports exited
	// for an OOM kill (CRI reason OOMKilled) since the kill, found when
	// the kill took the whole container and its cgroup away before the
	// victim could be looked up (memory.oom.group, kubelet's default on
	// cgroup v2 since 1.32).
	ByExitReason = "exitReason"
)

// ReasonOOMKilled is the CRI reason of a container that exited for an OOM
// kill.
const ReasonOOMKilled = "OOMKilled"

// exitWindow is how long before the kill event a container's OOM exit
// may be reported as finished (the clocks of the BPF event and the
// runtime differ), and exitPoll how often the runtime is asked while its
// exit is on its way.
const (
	exitWindow = 2 * time.Second
	exitPoll   = 100 * time.Millisecond
)

// ErrAmbiguous says that more than one container could be the victim's.
var ErrAmbiguous = errors.New("more than one container could be the victim's")

// CgroupIndexOptions say where the index finds the node's cgroups.
type CgroupIndexOptions struct {
	// CgroupV2 is the cgroup2 mount (the unified hierarchy on a hybrid
	// node); "" when there is none.
	CgroupV2 string
	// MemoryV1 is the cgroup v1 memory hierarchy's mount on a hybrid or v1
	// node; "" on a pure v2 node.
	MemoryV1 string
}

// CgroupIndex maps cgroups to the CRI containers that run in them. It is
// a cache filled from ListContainers and ContainerStatus's verbose info
// (the OCI spec's cgroupsPath) and refreshed when a lookup misses, so that
// an OOM kill costs no CRI call for a container already seen.
//
// Four ways lead from a victim to its container, in order: its cgroup v2
// id (runc joins the unified hierarchy on a hybrid node, so the id is the
// container's); its /proc/<pid>/cgroup paths, when they could be read
// before it exited; the names the kernel gave its cgroup and the parent's
// at the kill, which name the container's id and outlive a cgroup that a
// kill of the whole container removed before it was indexed; and on a v1
// memory hierarchy, the container whose
// memory.oom_control oom_kill counter (Linux 4.13+) grew since the index
// last looked, for runtimes that leave the unified hierarchy alone (crun
// on a hybrid node keeps its containers in the unified root).
type CgroupIndex struct {
	client runtimeapi.RuntimeServiceClient
	opts   CgroupIndexOptions
	reader *cgroup.Reader

	mu     sync.Mutex
	byCtr  map[string]*indexed
	byID   map[uint64]*indexed
	rootID uint64
	primed bool
	// exits are the containers already named by their OOM exit, so that
	// an exit names the kills of one cgroup only; gone names, by the
	// cgroup id of a kill so named, its container, for the other tasks
	// of the same group kill.
	exits map[string]bool
	gone  map[uint64]Workload
}

// maxGone bounds gone: past it, the oldest group kills are forgotten
// (all at once).
const maxGone = 1024

type indexed struct {
	w        Workload
	rel      string // the cgroup's path below a hierarchy's root
	v2ID     uint64
	oomKills uint64
}

// NewCgroupIndex returns an empty index over the runtime's containers.
func NewCgroupIndex(client runtimeapi.RuntimeServiceClient, opts CgroupIndexOptions) *CgroupIndex {
	x := &CgroupIndex{client: client, opts: opts, reader: cgroup.NewReader(),
		byCtr: map[string]*indexed{}, byID: map[uint64]*indexed{}, exits: map[string]bool{}, gone: map[uint64]Workload{}}
	if opts.CgroupV2 != "" {
		x.rootID, _ = inode(opts.CgroupV2)
	}
	return x
}

// Client returns the resolver's CRI runtime client.
func (r *RuntimeResolver) Client() runtimeapi.RuntimeServiceClient { return r.client }

// Refresh lists the runtime's containers and indexes the ones it has not
// seen; containers the runtime no longer lists are forgotten. The first
// Refresh takes each container's current OOM kill count as its baseline;
// a container first seen later starts from zero, so that a kill in a
// container created since the last refresh is still attributed.
func (x *CgroupIndex) Refresh(ctx context.Context) error {
	resp, err := x.client.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	x.mu.Lock()
	primed := x.primed
	x.mu.Unlock()
	seen := map[string]bool{}
	var added []*indexed
	for _, c := range resp.Containers {
		seen[c.Id] = true
		x.mu.Lock()
		_, ok := x.byCtr[c.Id]
		x.mu.Unlock()
		if ok {
			continue
		}
		st, err := x.client.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id, Verbose: true})
		if err != nil {
			continue // removed since the list
		}
		spec, err := SpecFromVerboseInfo(st.Info)
		if err != nil || spec == nil || spec.Linux == nil || spec.Linux.CgroupsPath == "" {
			continue
		}
		l := c.Labels
		e := &indexed{w: Workload{Namespace: l[LabelPodNamespace], Pod: l[LabelPodName], PodUID: l[LabelPodUID],
			Container: l[LabelContainerName], ContainerID: c.Id, PodSandboxID: c.PodSandboxId,
			CgroupsPath: spec.Linux.CgroupsPath}}
		e.rel = CgroupRelPath(spec.Linux.CgroupsPath)
		if x.opts.CgroupV2 != "" {
			if id, err := inode(filepath.Join(x.opts.CgroupV2, e.rel)); err == nil && id != x.rootID {
				e.v2ID = id
			}
		}
		if primed {
			e.oomKills = 0
		} else {
			e.oomKills = x.oomKills(e)
		}
		added = append(added, e)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for id, e := range x.byCtr {
		if !seen[id] {
			delete(x.byCtr, id)
			if x.byID[e.v2ID] == e {
				delete(x.byID, e.v2ID)
			}
		}
	}
	for _, e := range added {
		x.byCtr[e.w.ContainerID] = e
		if e.v2ID != 0 {
			x.byID[e.v2ID] = e
		}
	}
	x.primed = true
	return nil
}

// oomKills is the container's v1 memory.oom_control oom_kill, 0 when it
// cannot be read.
func (x *CgroupIndex) oomKills(e *indexed) uint64 {
	if x.opts.MemoryV1 == "" {
		return 0
	}
	m, err := x.reader.ReadMemoryV1(filepath.Join(x.opts.MemoryV1, e.rel))
	if err != nil || m.Err != nil {
		return 0
	}
	return m.OOMKill
}

// Lookup finds the container of an OOM victim and says how (ByCgroupID,
// ByProcCgroup, ByCgroupName, ByOOMControl, ByExitReason): by its cgroup
// id, /proc paths or cgroup names, refreshing the index once when the
// cache knows none of them, then by
// the v1 OOM kill counters, then, for a victim that may be a pod's (its
// task gone by the event, or its cgroup below kubepods: a kill that took
// its whole container), by the one container the runtime reports exited
// OOMKilled since the kill, asked until ctx ends.
// It returns an error wrapping ErrNotFound when no container matches (a
// process outside any CRI container), ErrAmbiguous when several could be
// the victim's.
func (x *CgroupIndex) Lookup(ctx context.Context, v Victim) (Workload, string, error) {
	if w, how, ok := x.direct(v); ok {
		return w, how, nil
	}
	if err := x.Refresh(ctx); err != nil {
		return Workload{}, "", err
	}
	if w, how, ok := x.direct(v); ok {
		return w, how, nil
	}
	w, how, err := x.byOOMCounter(v)
	if !errors.Is(err, ErrNotFound) || v.Time.IsZero() || !maybePod(v) {
		return w, how, err
	}
	return x.byExitReason(ctx, v, err)
}

// maybePod says whether a victim no container was found for may still be
// a pod's: its task was gone by the event, or its cgroup is below
// kubelet's (kubepods, with the cgroupfs or the systemd driver), gone
// from the runtime's list by the time it was asked (a kill that took the
// whole container). A process of the host's own is not waited for.
func maybePod(v Victim) bool {
	if len(v.Cgroups) == 0 {
		return true
	}
	for _, p := range v.Cgroups {
		if strings.Contains(p, "kubepods") {
			return true
		}
	}
	return false
}

// claimExit takes, as one step under the index's lock, the OOM exits
// found that no other lookup claimed meanwhile: one names the victim
// (and its cgroup id, for the other tasks of a group kill), several are
// ambiguous (names lists them, each claimed), none leaves the lookup
// waiting (done false).
func (x *CgroupIndex) claimExit(v Victim, found []Workload) (w Workload, names string, done bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	found = slices.DeleteFunc(found, func(w Workload) bool { return x.exits[w.ContainerID] })
	switch len(found) {
	case 0:
		return Workload{}, "", false
	case 1:
		x.exits[found[0].ContainerID] = true
		if v.CgroupID != 0 {
			if len(x.gone) >= maxGone {
				clear(x.gone)
			}
			// A group kill marks every task of the cgroup: the others'
			// events name the same container.
			x.gone[v.CgroupID] = found[0]
		}
		return found[0], "", true
	}
	list := make([]string, 0, len(found))
	for _, w := range found {
		x.exits[w.ContainerID] = true
		list = append(list, w.String())
	}
	sort.Strings(list)
	return Workload{}, strings.Join(list, ", "), true
}

// byExitReason waits, until ctx ends, for the runtime to report a
// container exited with reason OOMKilled no earlier than exitWindow
// before the kill, one not named before; notFound is the error when none
// comes. The container found also names the later events of the same
// cgroup id (the other tasks of a group kill) in direct.
func (x *CgroupIndex) byExitReason(ctx context.Context, v Victim, notFound error) (Workload, string, error) {
	exited := &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_EXITED}}}
	since := v.Time.Add(-exitWindow).UnixNano()
	for {
		// Another task of the same group kill, named meanwhile.
		x.mu.Lock()
		w, ok := x.gone[v.CgroupID]
		x.mu.Unlock()
		if ok && v.CgroupID != 0 {
			return w, ByExitReason, nil
		}
		resp, err := x.client.ListContainers(ctx, exited)
		if err != nil && ctx.Err() == nil {
			return Workload{}, "", fmt.Errorf("list exited containers: %w", err)
		}
		var found []Workload
		for _, c := range resp.GetContainers() {
			x.mu.Lock()
			seen := x.exits[c.Id]
			x.mu.Unlock()
			if seen {
				continue
			}
			st, err := x.client.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
			if err != nil || st.GetStatus().GetReason() != ReasonOOMKilled || st.GetStatus().GetFinishedAt() < since {
				continue
			}
			l := c.Labels
			found = append(found, Workload{Namespace: l[LabelPodNamespace], Pod: l[LabelPodName], PodUID: l[LabelPodUID],
				Container: l[LabelContainerName], ContainerID: c.Id, PodSandboxID: c.PodSandboxId})
		}
		if w, names, done := x.claimExit(v, found); done {
			if names != "" {
				return Workload{}, "", fmt.Errorf("%w: %s", ErrAmbiguous, names)
			}
			return w, ByExitReason, nil
		}
		select {
		case <-ctx.Done():
			return Workload{}, "", notFound
		case <-time.After(exitPoll):
		}
	}
}

// direct finds the victim's container by its cgroup id, its /proc paths
// or the names of its cgroups.
func (x *CgroupIndex) direct(v Victim) (Workload, string, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if v.CgroupID != 0 {
		if e, ok := x.byID[v.CgroupID]; ok {
			x.consumeOOMKill(e)
			return e.w, ByCgroupID, true
		}
		if w, ok := x.gone[v.CgroupID]; ok {
			return w, ByExitReason, true
		}
	}
	for _, p := range v.Cgroups {
		for _, e := range x.byCtr {
			if p == e.rel || strings.HasPrefix(p, e.rel+"/") {
				x.consumeOOMKill(e)
				return e.w, ByProcCgroup, true
			}
		}
	}
	for _, name := range v.CgroupNames {
		if id, ok := ContainerIDFromCgroupName(name); ok {
			if e, ok := x.byCtr[id]; ok {
				x.consumeOOMKill(e)
				return e.w, ByCgroupName, true
			}
		}
	}
	return Workload{}, "", false
}

// ContainerIDFromCgroupName returns the container id that a cgroup
// directory is named for: "<prefix>-<id>.scope" (the systemd driver's
// unit of containerd, CRI-O, docker and podman), or a bare id (cgroupfs).
// The id is hex, 12 to 64 digits. A runtime's monitor that is named for
// the container ("crio-conmon-<id>.scope") is not the container, and a
// slice or any other name names none.
func ContainerIDFromCgroupName(name string) (string, bool) {
	id := name
	if unit, ok := strings.CutSuffix(name, ".scope"); ok {
		i := strings.LastIndexByte(unit, '-')
		if i < 0 || strings.Contains(unit[:i], "conmon") {
			return "", false
		}
		id = unit[i+1:]
	}
	if len(id) < 12 || len(id) > 64 {
		return "", false
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", false
		}
	}
	return id, true
}

// byOOMCounter finds the one container whose v1 OOM kill counter grew.
// When several grew, the kills cannot be told apart: their counters are
// taken as the new baselines, so that later kills are attributed again.
func (x *CgroupIndex) byOOMCounter(v Victim) (Workload, string, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	notFound := fmt.Errorf("victim in cgroup %d %q: %w", v.CgroupID, v.Cgroups, ErrNotFound)
	if x.opts.MemoryV1 == "" {
		return Workload{}, "", notFound
	}
	type grown struct {
		e *indexed
		n uint64
	}
	var grew []grown
	for _, e := range x.byCtr {
		if n := x.oomKills(e); n > e.oomKills {
			grew = append(grew, grown{e, n})
		}
	}
	switch len(grew) {
	case 0:
		return Workload{}, "", notFound
	case 1:
		grew[0].e.oomKills++
		return grew[0].e.w, ByOOMControl, nil
	}
	names := make([]string, 0, len(grew))
	for _, g := range grew {
		g.e.oomKills = g.n
		names = append(names, g.e.w.String())
	}
	sort.Strings(names)
	return Workload{}, "", fmt.Errorf("%w: %s", ErrAmbiguous, strings.Join(names, ", "))
}

// consumeOOMKill counts a kill found by other means against the
// container's OOM counter, so that it is not attributed twice.
func (x *CgroupIndex) consumeOOMKill(e *indexed) {
	if n := x.oomKills(e); n > e.oomKills {
		e.oomKills++
	}
}

// String returns namespace/pod/container, or the container id for a
// container without kubelet's labels.
func (w Workload) String() string {
	if w.Pod == "" {
		return w.ContainerID
	}
	return w.Namespace + "/" + w.Pod + "/" + w.Container
}

// CgroupRelPath turns an OCI cgroupsPath into the cgroup's path below a
// hierarchy's root: as is with the cgroupfs driver ("/kubepods/pod<uid>/<id>"),
// expanded with the systemd driver ("kubepods-burstable-pod<uid>.slice:cri-containerd:<id>"
// is /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope,
// systemd's slice naming where each "-" opens a level).
func CgroupRelPath(cgroupsPath string) string {
	parts := strings.Split(cgroupsPath, ":")
	if len(parts) != 3 || strings.Contains(cgroupsPath, "/") {
		return filepath.Clean("/" + cgroupsPath)
	}
	slice, prefix, name := parts[0], parts[1], parts[2]
	var dirs []string
	if slice != "" && slice != "-.slice" {
		base := strings.TrimSuffix(slice, ".slice")
		for i := range base {
			if base[i] == '-' {
				dirs = append(dirs, base[:i]+".slice")
			}
		}
		dirs = append(dirs, slice)
	}
	unit := name
	if !strings.HasSuffix(name, ".slice") {
		unit = name + ".scope"
		if prefix != "" {
			unit = prefix + "-" + name + ".scope"
		}
	}
	dirs = append(dirs, unit)
	return "/" + strings.Join(dirs, "/")
}

// ProcCgroups reads the cgroup paths of process pid from
// procRoot/<pid>/cgroup, one per hierarchy line, without duplicates.
func ProcCgroups(procRoot string, pid uint32) ([]string, error) {
	path := filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "cgroup")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return ParseProcCgroup(data), nil
}

// ParseProcCgroup returns the distinct paths of a /proc/<pid>/cgroup file
// ("ID:CONTROLLERS:PATH" lines), leaving out the root.
func ParseProcCgroup(data []byte) []string {
	var out []string
	seen := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		_, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		_, p, ok := strings.Cut(rest, ":")
		if !ok || p == "/" || p == "" || seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, p)
	}
	return out
}

func inode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", path, err)
	}
	return st.Ino, nil
}
