package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/bpf"
	"github.com/nodeshim/nodeshim/internal/atomicfile"
	"github.com/nodeshim/nodeshim/internal/errdefs"
	"github.com/nodeshim/nodeshim/kernel/seccomp"
	"github.com/nodeshim/nodeshim/runtimes/cri"
)

// The pod labels the Kubernetes controllers set on their pods, which
// kubelet passes to the runtime with the pod's own labels: the owner
// reference itself is not in CRI.
const (
	labelPodTemplateHash = "pod-template-hash"                  // ReplicaSet (a Deployment's)
	labelStatefulSetPod  = "statefulset.kubernetes.io/pod-name" // StatefulSet
	labelJobName         = "batch.kubernetes.io/job-name"       // Job (1.27+)
	labelJobNameLegacy   = "job-name"                           // Job, older
	labelRevisionHash    = "controller-revision-hash"           // StatefulSet, DaemonSet
	replicasSuffix       = ".replicas.json"                     // the sidecar report
)

// errNoOwner is returned by podOwner for a pod no controller label names.
var errNoOwner = errdefs.New(errdefs.ErrNotFound, "no controller's labels")

// podOwner names the controller that owns a pod, from its name and the
// labels its controller set: "ReplicaSet/web-7d4f8b" for web-7d4f8b-x2k9q
// with pod-template-hash 7d4f8b, "StatefulSet/db" for db-2, "Job/batch"
// from its job-name. The replicas of a workload are the pods of one
// namespace with the same owner.
func podOwner(name string, labels map[string]string) (string, error) {
	cut := func(s string) (string, bool) {
		i := strings.LastIndexByte(s, '-')
		if i <= 0 {
			return "", false
		}
		return s[:i], true
	}
	if h := labels[labelPodTemplateHash]; h != "" {
		if rs, ok := cut(name); ok && strings.HasSuffix(rs, "-"+h) {
			return "ReplicaSet/" + rs, nil
		}
	}
	if labels[labelStatefulSetPod] == name && labels[labelRevisionHash] != "" {
		if sts, ok := cut(name); ok && strings.HasPrefix(labels[labelRevisionHash], sts+"-") {
			return "StatefulSet/" + sts, nil
		}
	}
	for _, l := range []string{labelJobName, labelJobNameLegacy} {
		if j := labels[l]; j != "" {
			return "Job/" + j, nil
		}
	}
	return "", fmt.Errorf("pod %s: %w (%s with a matching name, %s, %s)", name, errNoOwner,
		labelPodTemplateHash, labelStatefulSetPod, labelJobName)
}

// replicaReport is the sidecar of a profile recorded from replicas
// (PROFILE.replicas.json): which replicas were recorded and, for each
// syscall the profile allows, how many of them made it.
type replicaReport struct {
	Owner     string           `json:"owner"`
	Namespace string           `json:"namespace"`
	Container string           `json:"container"`
	Replicas  []replicaEntry   `json:"replicas"`
	Syscalls  []replicaSyscall `json:"syscalls"`
}

type replicaEntry struct {
	Pod         string `json:"pod"`
	ContainerID string `json:"containerID"`
	Syscalls    int    `json:"syscalls"`
}

type replicaSyscall struct {
	Name string `json:"name"`
	// Replicas counts the replicas that made the syscall; 0 for one only
	// the runtime needs.
	Replicas int  `json:"replicas"`
	Runtime  bool `json:"runtime,omitempty"`
}

// replicaPods returns the pods of f.namespace with the same owner as
// f.pod, f.pod first, the rest sorted, and that owner.
func replicaPods(ctx context.Context, f *recordFlags) (owner string, pods []string, err error) {
	r, err := cri.Dial(f.runtimeEndpoint)
	if err != nil {
		return "", nil, err
	}
	defer r.Close()
	resp, err := r.Client().ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		LabelSelector: map[string]string{cri.LabelPodNamespace: f.namespace},
	}})
	if err != nil {
		return "", nil, fmt.Errorf("list the pods of namespace %s: %w", f.namespace, err)
	}
	byName := map[string]map[string]string{}
	for _, s := range resp.GetItems() {
		byName[s.GetMetadata().GetName()] = s.GetLabels()
	}
	labels, ok := byName[f.pod]
	if !ok {
		return "", nil, fmt.Errorf("pod %s/%s: %w: no ready pod sandbox", f.namespace, f.pod, errdefs.ErrNotFound)
	}
	if owner, err = podOwner(f.pod, labels); err != nil {
		return "", nil, err
	}
	for name, l := range byName {
		if o, err := podOwner(name, l); err == nil && o == owner && name != f.pod {
			pods = append(pods, name)
		}
	}
	sort.Strings(pods)
	return owner, append([]string{f.pod}, pods...), nil
}

// recordReplicas records container f.container of every replica of f.pod
// at once, one recorder each, and writes the union as the profile with
// the sidecar report of how many replicas made each syscall.
func recordReplicas(cmd *cobra.Command, f *recordFlags, arch string, base *seccomp.Profile) error {
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	owner, pods, err := replicaPods(ctx, f)
	if err != nil {
		return err
	}
	slog.Info("replicas", "owner", owner, "namespace", f.namespace, "pods", strings.Join(pods, ","))
	type replica struct {
		pod, id string
		rec     *bpf.Recorder
	}
	var reps []replica
	defer func() {
		for _, r := range reps {
			r.rec.Close()
		}
	}()
	var needs []string
	measured := map[string]bool{}
	for _, pod := range pods {
		one := *f
		one.pod = pod
		pid, bin, err := containerPID(ctx, &one)
		if err != nil {
			return err
		}
		if f.runtimeNeeds && !measured[bin] {
			measured[bin] = true
			n, err := runtimeNeeds(ctx, f, bin)
			if err != nil {
				return err
			}
			needs = append(needs, n...)
		}
		target, err := bpf.PIDTarget(f.procRoot, pid)
		if err != nil {
			return err
		}
		rec, err := bpf.NewRecorder(target)
		if err != nil {
			return err
		}
		id, _ := containerID(ctx, &one)
		reps = append(reps, replica{pod: pod, id: id, rec: rec})
	}
	slog.Info("recording", "replicas", len(reps), "duration", f.duration)
	if f.duration > 0 {
		var cancelT context.CancelFunc
		ctx, cancelT = context.WithTimeout(ctx, f.duration)
		defer cancelT()
	}
	<-ctx.Done()

	report := replicaReport{Owner: owner, Namespace: f.namespace, Container: f.container}
	made := map[string]int{}
	var all []bpf.NamedCount
	for _, r := range reps {
		counts, err := r.rec.Counts()
		if err != nil {
			return fmt.Errorf("replica %s: %w", r.pod, err)
		}
		named := bpf.NameCounts(counts)
		all = append(all, named...)
		names := bpf.AllowedNames(named)
		for _, n := range names {
			made[n]++
		}
		report.Replicas = append(report.Replicas, replicaEntry{Pod: r.pod, ContainerID: r.id, Syscalls: len(names)})
	}
	slices.Sort(needs)
	needs = slices.Compact(needs)
	allowed := make([]string, 0, len(made)+len(needs))
	for n := range made {
		allowed = append(allowed, n)
	}
	for _, n := range needs {
		if made[n] == 0 {
			allowed = append(allowed, n)
		}
	}
	slices.Sort(allowed)
	for _, n := range allowed {
		report.Syscalls = append(report.Syscalls, replicaSyscall{Name: n, Replicas: made[n], Runtime: slices.Contains(needs, n)})
	}
	profile, kept := bpf.BuildProfile(allowed, arch, base)
	for _, name := range kept {
		slog.Warn("a replica used a syscall that the base profile gives another action than allow; the base rule is kept", "syscall", name)
	}
	data, err := bpf.MarshalProfile(profile)
	if err != nil {
		return err
	}
	side, err := json.MarshalIndent(report, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the replicas report: %w", err)
	}
	if err := atomicfile.WriteFile(f.outFile+replicasSuffix, append(side, '\n'), 0o644); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(f.outFile, data, 0o644); err != nil {
		return err
	}
	slog.Info("wrote seccomp profile", "path", f.outFile, "syscalls", len(allowed), "replicas", len(reps), "report", f.outFile+replicasSuffix)
	return writeRecordTable(cmd, mergeNamed(all), needs)
}

// mergeNamed adds up the counts of the same syscall across replicas.
func mergeNamed(all []bpf.NamedCount) []bpf.NamedCount {
	idx := map[uint32]int{}
	var out []bpf.NamedCount
	for _, c := range all {
		if i, ok := idx[c.Nr]; ok {
			out[i].Count += c.Count
			continue
		}
		idx[c.Nr] = len(out)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Count > out[j].Count })
	return out
}

// containerID returns the CRI id of f's container.
func containerID(ctx context.Context, f *recordFlags) (string, error) {
	r, err := cri.Dial(f.runtimeEndpoint)
	if err != nil {
		return "", err
	}
	defer r.Close()
	p, err := r.Resolve(ctx, cri.Target{Namespace: f.namespace, Pod: f.pod, Container: f.container})
	if err != nil {
		return "", err
	}
	return p.ContainerID, nil
}
