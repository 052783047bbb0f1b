package migration_test

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/cluster/apis/v1alpha1"
	"github.com/nodeshim/nodeshim/cluster/kubectl"
	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/criu/pod"
	"github.com/nodeshim/nodeshim/testenv/clustertest"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/downtime"
	"github.com/nodeshim/nodeshim/testenv/migrationtest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// EnvMigrationMiB lists BenchmarkPodMigrationDowntime's working sets in
// MiB ("64,1024").
const EnvMigrationMiB = "NODESHIM_MIGRATION_MIB"

// podmanRT is the podman of BenchmarkPodMigrationDowntime's podman
// column, closed when the benchmark ends.
var podmanRT runtimetest.Env

// workContainer is the workload pod's one container.
const workContainer = "work"

// proc is the host's /proc: both nodes' processes are in the host's PID
// namespace.
const proc = "/proc"

// BenchmarkPodMigrationDowntime moves the same workload four ways in each
// iteration, for each working set (NODESHIM_MIGRATION_MIB, "64,1024" by
// default): testenv/downtime's busybox shell, holding N MiB of random
// bytes as anonymous memory and counting in /count every 20 ms.
//
//   - nodeshim: a Pod of that one container on this machine's node, moved
//     to node-b by `kubectl nodeshim migrate --to node-b
//     --delete-original` (a PodMigration, StopAndCopy). The downtime is
//     from the freeze on A (the start of the counter's longest pause
//     there) to the counter's first advance on B past the count it
//     froze at, both read from the host through /proc/PID/root/count
//     every 5 ms, the process found in each node's kubelet cgroup tree.
//     Beside it: the PodMigration's own status.downtime, the pod
//     checkpoint's frozen time and size (its manifest on the source),
//     and where the time went, from the objects' transitions as a 50 ms
//     poll saw them.
//   - lazy: the same, with `--mode Lazy`: the pod checkpoint without its
//     memory, the restored pod running on B before its memory has
//     arrived (fetched from A's page servers on its faults and in the
//     background), the original frozen on A until then. Measured the
//     same way; A's counter stops for good at the freeze.
//   - coldstart: the same Pod deleted on A and created again on node-b;
//     from the delete to the counter's first value on B (which starts
//     from 1: the state is lost, and the working set is made again).
//   - podman: podman's own container migration of the same container
//     between two storage roots on this machine (downtime.MoveContainer:
//     checkpoint --export, restore --import), measured the same way.
//
// The figures and how to read them are in BENCHMARKS.md, "Downtime:
// moving a pod between two nodes". Reproduce (as root, with the
// NODESHIM_* tool paths the Makefile exports; `make bench` runs one
// iteration of each size):
//
//	cd e2e/migration && go test -run '^$' -bench BenchmarkPodMigrationDowntime -benchtime 2x -timeout 40m .
func BenchmarkPodMigrationDowntime(b *testing.B) {
	b.ReportAllocs()
	sizes, err := downtime.Sizes(EnvMigrationMiB, 64, 1024)
	if err != nil {
		b.Fatal(err)
	}
	p := migrationtest.Start(b, bins)
	b.Cleanup(func() {
		if err := podmanRT.Close(); err != nil {
			b.Error(err)
		}
	})
	pm := podmanRT.Podman(b)
	// podman's runc finds CRIU on PATH.
	criutest.RequireOnPath(b)
	bench := &podBench{p: p,
		aDir:    downtime.CgroupDir("/sys/fs/cgroup", p.Cluster.CgroupRoot),
		bDir:    downtime.CgroupDir("/sys/fs/cgroup", p.TargetNode.CgroupRoot),
		podmanA: downtime.Root{P: pm}, podmanB: downtime.SecondRoot(b, pm),
		runc: pm.RuntimePath(runtimetest.RuntimeRunc)}
	for _, mib := range sizes {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			var sum sums
			for b.Loop() {
				bench.seq++
				m := bench.migrate(b, mib, v1alpha1.ModeStopAndCopy)
				lz := bench.migrate(b, mib, v1alpha1.ModeLazy)
				c := bench.coldStart(b, mib)
				pr := downtime.MoveContainer(b, bench.podmanA, bench.podmanB, fmt.Sprintf("dt-podman-%d", bench.seq), mib, downtime.MoveOptions{Runtime: bench.runc})
				b.Logf("podman dt-podman-%d: %d MiB anonymous; count %d on A, %d on B; checkpoint %s (frozen %s), archive %d bytes, restore %s, downtime %s",
					bench.seq, pr.AnonBytes>>20, pr.Before, pr.After, ms(pr.Checkpoint), ms(pr.Frozen), pr.ArchiveBytes, ms(pr.Restore), ms(pr.Downtime))
				sum.add(m, lz, c, pr)
			}
			sum.report(b)
		})
	}
}

// podBench is the benchmark's cluster, podman roots and names.
type podBench struct {
	p *migrationtest.Pair
	// aDir and bDir are the two kubelets' cgroup trees.
	aDir, bDir       string
	podmanA, podmanB downtime.Root
	runc             string
	seq              int
}

// podMove is what one PodMigration measured; the durations after
// Downtime are its breakdown, in order, each from the end of the last.
type podMove struct {
	// Downtime: the freeze on A to the counter's first advance on B.
	Downtime time.Duration
	// Status is the PodMigration's status.downtime.
	Status time.Duration
	// Frozen is the pod checkpoint's freeze-to-thaw (its manifest);
	// CheckpointBytes the containers' archives.
	Frozen          time.Duration
	CheckpointBytes int64
	AnonBytes       int64

	// ToCheckpoint: the migration created to the checkpoint's start on A
	// (before the freeze: not downtime).
	ToCheckpoint time.Duration
	// Stored: the thaw to the PodCheckpoint seen Stored.
	Stored time.Duration
	// ToTransfer: Stored to the send's start (the Transferred
	// condition's send time taken from when it was seen).
	ToTransfer time.Duration
	// Transfer: the send, as the source's reporter records it.
	Transfer time.Duration
	// ToPod: Transferred seen to the PodMigration seen Restoring (the
	// restored Pod created).
	ToPod time.Duration
	// ToProcess: the restored Pod created to its process seen on B.
	ToProcess time.Duration
	// ToCount: that process seen to its first advance.
	ToCount time.Duration
	// Overlap: the counter's first advance on B to its last on A (the
	// original runs on until the controller has seen the restored pod
	// run and deleted it).
	Overlap time.Duration
}

// waits is the time spent between the steps: the controller's and the
// reporters' polls, and the status writes.
func (m podMove) waits() time.Duration { return m.Stored + m.ToTransfer + m.ToPod }

// coldMove is what one cold start measured.
type coldMove struct {
	// Downtime: the delete on A to the counter's first value on B.
	Downtime time.Duration
	// Gone: the delete to the Pod gone from the API.
	Gone time.Duration
}

// sums adds the iterations' figures up.
type sums struct {
	n      int
	pod    podMove
	lazy   podMove
	cold   coldMove
	podman downtime.Move
}

func (s *sums) add(m, lz podMove, c coldMove, pr downtime.Move) {
	s.n++
	for _, f := range []struct{ to, from *time.Duration }{
		{&s.lazy.Downtime, &lz.Downtime}, {&s.lazy.Status, &lz.Status}, {&s.lazy.Frozen, &lz.Frozen},
		{&s.lazy.Transfer, &lz.Transfer}, {&s.lazy.ToProcess, &lz.ToProcess}, {&s.lazy.ToCount, &lz.ToCount},
		{&s.lazy.Stored, &lz.Stored}, {&s.lazy.ToTransfer, &lz.ToTransfer}, {&s.lazy.ToPod, &lz.ToPod},
		{&s.pod.Downtime, &m.Downtime}, {&s.pod.Status, &m.Status}, {&s.pod.Frozen, &m.Frozen},
		{&s.pod.ToCheckpoint, &m.ToCheckpoint}, {&s.pod.Stored, &m.Stored}, {&s.pod.ToTransfer, &m.ToTransfer},
		{&s.pod.Transfer, &m.Transfer}, {&s.pod.ToPod, &m.ToPod}, {&s.pod.ToProcess, &m.ToProcess},
		{&s.pod.ToCount, &m.ToCount}, {&s.pod.Overlap, &m.Overlap},
		{&s.cold.Downtime, &c.Downtime}, {&s.cold.Gone, &c.Gone},
		{&s.podman.Downtime, &pr.Downtime}, {&s.podman.Frozen, &pr.Frozen},
		{&s.podman.Checkpoint, &pr.Checkpoint}, {&s.podman.Restore, &pr.Restore},
	} {
		*f.to += *f.from
	}
	s.pod.CheckpointBytes += m.CheckpointBytes
	s.lazy.CheckpointBytes += lz.CheckpointBytes
	s.pod.AnonBytes += m.AnonBytes
	s.podman.ArchiveBytes += pr.ArchiveBytes
}

func (s *sums) report(b *testing.B) {
	if s.n == 0 {
		return
	}
	n := float64(s.n)
	msf := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / n }
	mib := func(v int64) float64 { return float64(v) / (1 << 20) / n }
	b.ReportMetric(msf(s.pod.Downtime), "nodeshim-ms")
	b.ReportMetric(msf(s.lazy.Downtime), "lazy-ms")
	if s.pod.Downtime > 0 {
		b.ReportMetric(float64(s.lazy.Downtime)/float64(s.pod.Downtime), "lazy/stop-and-copy")
	}
	b.ReportMetric(msf(s.lazy.Status), "lazy-status-downtime-ms")
	b.ReportMetric(msf(s.lazy.Frozen), "lazy-frozen-ms")
	b.ReportMetric(msf(s.lazy.waits()), "lazy-waits-ms")
	b.ReportMetric(msf(s.lazy.Transfer), "lazy-transfer-ms")
	b.ReportMetric(msf(s.lazy.ToProcess+s.lazy.ToCount), "lazy-restore-ms")
	b.ReportMetric(mib(s.lazy.CheckpointBytes), "lazy-checkpoint-MiB")
	b.ReportMetric(msf(s.cold.Downtime), "coldstart-ms")
	b.ReportMetric(msf(s.podman.Downtime), "podman-ms")
	b.ReportMetric(msf(s.pod.Status), "status-downtime-ms")
	b.ReportMetric(msf(s.pod.Frozen), "frozen-ms")
	b.ReportMetric(msf(s.podman.Frozen), "podman-frozen-ms")
	b.ReportMetric(msf(s.pod.waits()), "waits-ms")
	b.ReportMetric(msf(s.pod.Transfer), "transfer-ms")
	b.ReportMetric(msf(s.pod.ToProcess+s.pod.ToCount), "restore-ms")
	b.ReportMetric(mib(s.pod.AnonBytes), "anon-MiB")
	b.ReportMetric(mib(s.pod.CheckpointBytes), "checkpoint-MiB")
	b.ReportMetric(mib(s.podman.ArchiveBytes), "podman-archive-MiB")
}

// ms rounds d to the millisecond, for the logs.
func ms(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// workloadPod is a Pod of default bound to node, with the workload of
// mib MiB as its one container.
func workloadPod(name, node string, mib int) *corev1.Pod {
	var grace int64
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: workContainer, Image: runtimetest.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", downtime.Script(mib)}}}},
	}
}

// quiet waits until no workload counts on either node: each column
// starts with the last one's processes gone (a Pod deleted at once
// leaves the API before kubelet has stopped its containers).
func (pb *podBench) quiet(b *testing.B) {
	b.Helper()
	testutil.Eventually(b, "no workload counting on either node", func() error {
		for _, dir := range []string{pb.aDir, pb.bDir} {
			pids, err := downtime.Counting(proc, dir)
			if err != nil {
				return err
			}
			if len(pids) > 0 {
				return fmt.Errorf("%s holds %v", dir, pids)
			}
		}
		return nil
	})
}

// start runs the workload Pod name on the source node and waits until it
// counts with its working set in place; it returns the anonymous memory
// its processes hold and a Watcher of both nodes (source 0 is A's, 1 B's)
// that has seen A's counter.
func (pb *podBench) start(b *testing.B, name string, mib int) (int64, *downtime.Watcher) {
	b.Helper()
	p := pb.p
	pb.quiet(b)
	p.RunPod(b, workloadPod(name, p.Source.Name, mib))
	p.Cluster.Count(b, name, workContainer, 5)
	pids, err := downtime.Counting(proc, pb.aDir)
	if err != nil || len(pids) == 0 {
		b.Fatalf("pod %s's processes not found under %s: %v", name, pb.aDir, err)
	}
	anon, err := downtime.Anon(proc, pids...)
	if err != nil {
		b.Fatal(err)
	}
	if anon < int64(mib)<<20 {
		b.Fatalf("pod %s holds %d bytes of anonymous memory, below its %d MiB working set", name, anon, mib)
	}
	w := downtime.Watch(proc, downtime.InCgroup(proc, pb.aDir), downtime.InCgroup(proc, pb.bDir))
	testutil.Eventually(b, "the watcher reads pod "+name+"'s counter", func() error {
		if !slices.ContainsFunc(w.Readings(), downtime.OnSource(0)) {
			return fmt.Errorf("no reading under %s", pb.aDir)
		}
		return nil
	})
	return anon, w
}

// migrate moves a workload Pod with `kubectl nodeshim migrate
// --delete-original --mode mode`, measures it, and removes the
// PodMigration (and with it the checkpoint's files on both nodes) and the
// restored Pod.
func (pb *podBench) migrate(b *testing.B, mib int, mode v1alpha1.MigrationMode) podMove {
	b.Helper()
	p := pb.p
	ctx := b.Context()
	lazy := mode == v1alpha1.ModeLazy
	name := fmt.Sprintf("dt-%d", pb.seq)
	if lazy {
		name += "-lazy"
	}
	mname := name + "-move"
	var m podMove
	var w *downtime.Watcher
	m.AnonBytes, w = pb.start(b, name, mib)
	defer w.Stop()

	tl := watchMigration(ctx, p, mname)
	var out bytes.Buffer
	t0 := time.Now()
	err := kubectl.Run(ctx, []string{"migrate", name, "--to", p.Target.Name, "--delete-original", "--name", mname, "--mode", string(mode)},
		kubectl.Env{Stdout: &out, Stderr: &out, Config: p.Cluster.API.AdminConfig(), Namespace: "default", Poll: 100 * time.Millisecond})
	if err != nil {
		b.Fatalf("kubectl nodeshim migrate: %v\n%s\n%s\n%s", err, out.String(), p.Source.Logs(), p.Target.Logs())
	}
	mig, err := p.Admin.GetPodMigration(ctx, "default", mname)
	if err != nil {
		b.Fatal(err)
	}
	if mig.Status.Downtime != nil {
		m.Status = mig.Status.Downtime.Duration
	}
	pc, err := p.Admin.GetPodCheckpoint(ctx, "default", mig.Status.PodCheckpoint)
	if err != nil {
		b.Fatal(err)
	}
	man, err := pod.ReadManifest(pc.Status.Location)
	if err != nil {
		b.Fatal(err)
	}
	// The freeze is A's longest pause within the checkpoint; the
	// original counts on after the thaw until the controller, having
	// seen the restored pod run, deletes it. A lazy checkpoint's pod is
	// never thawed: its counter stops for good at the freeze.
	// ready is when the source was done with the pod: its thaw, or for
	// a lazy checkpoint the last page server ready.
	ready := man.ThawedAt
	if lazy {
		ready = man.FrozenAt
		for _, c := range man.Containers {
			if c.DumpFinishedAt.After(ready) {
				ready = c.DumpFinishedAt
			}
		}
	}
	var freeze, first, resumed downtime.Reading
	testutil.Eventually(b, "the original gone from A and the restored pod counting on B", func() error {
		if pids, err := downtime.Counting(proc, pb.aDir); err != nil || len(pids) > 0 {
			return fmt.Errorf("A still holds %v (%v)", pids, err)
		}
		rs := w.Readings()
		var ok bool
		to := man.ThawedAt
		if lazy {
			to = time.Now()
		}
		if freeze, ok = downtime.Freeze(rs, downtime.OnSource(0), man.CheckpointedAt, to); !ok {
			return fmt.Errorf("no pause of A's counter seen (%d readings)", len(rs))
		}
		if first, resumed, ok = downtime.Resumed(rs, downtime.OnSource(0), freeze.N); !ok {
			return fmt.Errorf("B's counter not seen past %d (first reading there %+v)", freeze.N, first)
		}
		m.Overlap = lastOf(rs, downtime.OnSource(0)).At.Sub(resumed.At)
		return nil
	})
	rs := w.Stop()
	seen := tl.stop()
	m.Downtime = resumed.At.Sub(freeze.At)

	m.Frozen = ready.Sub(man.FrozenAt)
	for _, c := range man.Containers {
		m.CheckpointBytes += c.Size
	}
	for _, c := range mig.Status.Conditions {
		if c.Type == v1alpha1.ConditionTransferred && c.Status == condition.True {
			m.Transfer = sentIn(b, c.Message)
		}
	}
	for _, ev := range []string{seenStored, seenTransferred, seenRestoring, seenSucceeded} {
		if seen[ev].IsZero() {
			b.Fatalf("%s not seen: %v", ev, seen)
		}
	}
	m.ToCheckpoint = man.CheckpointedAt.Sub(t0)
	m.Stored = seen[seenStored].Sub(ready)
	sendStart := seen[seenTransferred].Add(-m.Transfer)
	m.ToTransfer = sendStart.Sub(seen[seenStored])
	m.ToPod = seen[seenRestoring].Sub(seen[seenTransferred])
	m.ToProcess = first.At.Sub(seen[seenRestoring])
	m.ToCount = resumed.At.Sub(first.At)
	last := lastOf(rs, downtime.OnSource(0))
	// One line per move: go test keeps only ten lines of a benchmark's log.
	b.Logf("nodeshim %s: %d MiB anonymous, pod checkpoint %d bytes; count %d at the freeze, %d first seen on B, %d when it went on, %d last on A; "+
		"downtime %s (from the manifest's freeze %s), status.downtime %s, frozen %s; "+
		"migration to checkpoint start %s | thaw to Stored seen %s, to the send %s, send %s, to Restoring seen %s, to B's process %s, to its first count %s | "+
		"A counted on %s after B went on; Succeeded seen %s after B went on; %d readings",
		name, m.AnonBytes>>20, m.CheckpointBytes, freeze.N, first.N, resumed.N, last.N,
		ms(m.Downtime), ms(resumed.At.Sub(man.FrozenAt)), m.Status, ms(m.Frozen),
		ms(m.ToCheckpoint), ms(m.Stored), ms(m.ToTransfer), ms(m.Transfer), ms(m.ToPod), ms(m.ToProcess), ms(m.ToCount),
		ms(m.Overlap), ms(seen[seenSucceeded].Sub(resumed.At)), len(rs))

	// Between runs: the PodMigration goes, and with it its PodCheckpoint
	// and the checkpoint's files on both nodes; then the restored Pod.
	p.DeleteMigration(b, mname)
	clustertest.DeletePod(b, p.Clients, mig.Status.RestoredPod)
	return m
}

// coldStart deletes a workload Pod on A and creates it again on B, and
// measures from the delete to the counter's first value on B.
func (pb *podBench) coldStart(b *testing.B, mib int) coldMove {
	b.Helper()
	p := pb.p
	ctx := b.Context()
	name := fmt.Sprintf("dt-cold-%d", pb.seq)
	anon, w := pb.start(b, name, mib)
	defer w.Stop()

	var c coldMove
	t0 := time.Now()
	clustertest.DeletePod(b, p.Clients, name)
	c.Gone = time.Since(t0)
	if _, err := p.Clients.CoreV1().Pods("default").Create(ctx, workloadPod(name, p.Target.Name, mib), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	var first downtime.Reading
	testutil.Eventually(b, "pod "+name+" counting on B", func() error {
		i := slices.IndexFunc(w.Readings(), downtime.OnSource(1))
		if i < 0 {
			return fmt.Errorf("no reading under %s", pb.bDir)
		}
		first = w.Readings()[i]
		return nil
	})
	rs := w.Stop()
	c.Downtime = first.At.Sub(t0)
	last := lastOf(rs, downtime.OnSource(0))
	b.Logf("coldstart %s: %d MiB anonymous; count %d last seen on A %s after the delete, gone from the API after %s; first count on B %d, %s after the delete",
		name, anon>>20, last.N, ms(last.At.Sub(t0)), ms(c.Gone), first.N, ms(c.Downtime))
	clustertest.DeletePod(b, p.Clients, name)
	return c
}

// lastOf is the last of rs that on claims.
func lastOf(rs []downtime.Reading, on func(downtime.Reading) bool) downtime.Reading {
	for i := len(rs) - 1; i >= 0; i-- {
		if on(rs[i]) {
			return rs[i]
		}
	}
	return downtime.Reading{}
}

// sentRE finds the send's duration in the Transferred condition's
// message ("... N bytes sent in 1.234s").
var sentRE = regexp.MustCompile(`sent in (\S+)$`)

func sentIn(b *testing.B, msg string) time.Duration {
	b.Helper()
	sm := sentRE.FindStringSubmatch(msg)
	if sm == nil {
		b.Fatalf("no send time in the Transferred condition: %q", msg)
	}
	d, err := time.ParseDuration(sm[1])
	if err != nil {
		b.Fatalf("the Transferred condition's send time: %q: %v", msg, err)
	}
	return d
}

// What a timeline notes of a PodMigration.
const (
	seenStored      = "PodCheckpoint Stored"
	seenTransferred = "Transferred"
	seenRestoring   = "phase Restoring"
	seenSucceeded   = "phase Succeeded"
)

// timeline notes when a PodMigration and its PodCheckpoint were first
// seen at each step, reading both every 50 ms: the objects' own times
// are whole seconds.
type timeline struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	seen   map[string]time.Time
}

func watchMigration(ctx context.Context, p *migrationtest.Pair, name string) *timeline {
	ctx, cancel := context.WithCancel(ctx)
	tl := &timeline{cancel: cancel, done: make(chan struct{}), seen: map[string]time.Time{}}
	note := func(ev string, at time.Time) {
		tl.mu.Lock()
		defer tl.mu.Unlock()
		if _, ok := tl.seen[ev]; !ok {
			tl.seen[ev] = at
		}
	}
	go func() {
		defer close(tl.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			m, err := p.Admin.GetPodMigration(ctx, "default", name)
			if err != nil {
				continue
			}
			now := time.Now()
			switch m.Status.Phase {
			case v1alpha1.MigrationRestoring:
				note(seenRestoring, now)
			case v1alpha1.MigrationSucceeded:
				note(seenSucceeded, now)
			}
			for _, c := range m.Status.Conditions {
				if c.Type == v1alpha1.ConditionTransferred && c.Status == condition.True {
					note(seenTransferred, now)
				}
			}
			tl.mu.Lock()
			_, stored := tl.seen[seenStored]
			tl.mu.Unlock()
			if pcName := m.Status.PodCheckpoint; pcName != "" && !stored {
				if pc, err := p.Admin.GetPodCheckpoint(ctx, "default", pcName); err == nil && pc.Status.Phase == v1alpha1.PhaseStored {
					note(seenStored, time.Now())
				}
			}
		}
	}()
	return tl
}

// stop ends the timeline and returns what it saw.
func (tl *timeline) stop() map[string]time.Time {
	tl.cancel()
	<-tl.done
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.seen
}
