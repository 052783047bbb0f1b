package restore_test

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/criu/pod"
	"github.com/nodeshim/nodeshim/internal/mountinfo"
	"github.com/nodeshim/nodeshim/runtimes/cri"
	"github.com/nodeshim/nodeshim/runtimes/restoring"
	"github.com/nodeshim/nodeshim/shim/transfer/transfertest"
	"github.com/nodeshim/nodeshim/testenv/criutest"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// lazyTLS writes certificates for a lazy move on this host: a cluster CA
// that issued the source's page-server certificate and the target's,
// and a stranger's certificate of another CA.
func lazyTLS(t *testing.T) (source, target, stranger *criu.TLS) {
	t.Helper()
	dir := t.TempDir()
	ca := transfertest.NewCA(t, dir, "cluster")
	other := transfertest.NewCA(t, dir, "other")
	issue := func(ca *transfertest.CA, node string) *criu.TLS {
		cert, key := ca.NodeCert(t, dir, node)
		return &criu.TLS{CACert: ca.File, Cert: cert, Key: key}
	}
	return issue(ca, "source"), issue(ca, "target"), issue(other, "stranger")
}

// withLazyTLS has the handler fetch lazy checkpoints' memory with tls
// (Config.LazyTLS) until t ends.
func withLazyTLS(t *testing.T, tls *criu.TLS) {
	t.Helper()
	editRestoreConfig(t, func(c *restoring.Config) {
		c.LazyTLS = &restoring.LazyTLS{CACert: tls.CACert, Cert: tls.Cert, Key: tls.Key}
	})
}

// lazyCheckpoint is a running lazy pod checkpoint (criu/pod Options.Lazy)
// of a one-container pod: published once its page server serves the
// container's memory, done when a restore has fetched all of it.
type lazyCheckpoint struct {
	path    string
	pid     int // the original container's process
	started time.Time
	took    time.Duration // to published
	done    chan error
	cancel  context.CancelFunc
}

// startLazyCheckpoint checkpoints p's container name lazily into the
// checkpoint directory with its page server on 127.0.0.1 under tls, and
// returns once the checkpoint is published.
func startLazyCheckpoint(t *testing.T, c *runtimetest.Containerd, bin criu.Binary, p *runtimetest.Pod, name string, tls *criu.TLS) *lazyCheckpoint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	res, err := cri.Dial(c.Address)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	ref := criu.ContainerRef{Namespace: p.Config.Metadata.Namespace, Pod: p.Config.Metadata.Name, Container: name}
	proc, err := res.Resolve(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := criu.ContainerTarget("/proc", proc.PID, proc.Spec, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tg.Ref, tg.ID, tg.Runtime = ref, proc.ContainerID, "cri"
	tg.Image, tg.ImageRef, tg.Status, tg.Created = proc.Image, proc.ImageRef, proc.Status, proc.Created
	target := pod.Pod{Namespace: ref.Namespace, Name: ref.Pod, UID: p.Config.Metadata.Uid, SandboxID: p.ID,
		Sandbox:      pod.Sandbox{RuntimeHandler: runtimetest.RuntimeRunc},
		FreezeCgroup: filepath.Dir(tg.Container.FreezeCgroup), Containers: []criu.Target{tg}}
	port := func() (int, error) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	lc := &lazyCheckpoint{pid: proc.PID, started: time.Now(), done: make(chan error, 1), cancel: cancel}
	published := make(chan string, 1)
	go func() {
		_, err := pod.Checkpoint(ctx, target, pod.Options{Dir: ckptDir, Criu: criu.Options{Binary: bin},
			Lazy: &pod.Lazy{Address: "127.0.0.1", Port: port, TLS: tls, Published: func(p string) { published <- p }}})
		lc.done <- err
	}()
	select {
	case lc.path = <-published:
		lc.took = time.Since(lc.started)
	case err := <-lc.done:
		t.Fatalf("lazy pod checkpoint ended before it was published: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		os.RemoveAll(lc.path)
	})
	return lc
}

// TestLazyPodMigration moves a counting container's pod on this node by
// a lazy pod checkpoint and a restore through containerd under the
// nodeshim handler: the restored container counts on from where it was
// before its memory has arrived, the original's process is gone once the
// memory is fetched, and the restore's work directory, which outlives
// the create, is removed then. A target whose certificate another CA
// issued gets no container, and the checkpoint ends when cancelled.
func TestLazyPodMigration(t *testing.T) {
	c := rt.Containerd2(t)
	bin := criutest.Require(t)
	if _, err := os.Stat("/proc/sys/vm/unprivileged_userfaultfd"); err != nil {
		testutil.Skip(t, "kernel without userfaultfd: %v", err)
	}
	source, target, stranger := lazyTLS(t)

	t.Run("moves", func(t *testing.T) {
		withLazyTLS(t, target)
		ctr, before := runCounter(t, c)
		lc := startLazyCheckpoint(t, c, bin, ctr.Pod, "counter", source)
		restored := restorePod(t, c, filepath.Base(lc.path))
		start := time.Now()
		rctr := startRestored(t, restored, "counter", before)
		running := time.Since(start)
		select {
		case err := <-lc.done:
			if err != nil {
				t.Fatalf("lazy pod checkpoint: %v", err)
			}
		case <-time.After(2 * time.Minute):
			t.Fatal("the lazy pod checkpoint did not end 2 minutes after the restore")
		}
		fetched := time.Since(start)
		if st, err := criu.ReadProcState("/proc", lc.pid); err == nil && !st.Gone() {
			t.Errorf("the original's pid %d is still there (%s) after its memory was fetched", lc.pid, st)
		}
		testutil.Eventually(t, "the restore's work directory is removed once the memory is fetched", func() error {
			ents, _ := os.ReadDir(workDir)
			for _, e := range ents {
				if e.Name() != ".criu-version" {
					return fmt.Errorf("%s keeps %s", workDir, e.Name())
				}
			}
			return nil
		})
		n := waitCount(t, rctr, waitCount(t, rctr, -1))
		t.Logf("published %s after the checkpoint started; restored and counting (%d) %s after the pod was created, memory fetched %s after",
			lc.took.Round(time.Millisecond), n, running.Round(time.Millisecond), fetched.Round(time.Millisecond))
		rctr.Stop(t, 0)
		rctr.Remove(t)
		if err := restored.Remove(); err != nil {
			t.Fatal(err)
		}
		checkNothingLeft(t)
	})

	t.Run("stranger refused", func(t *testing.T) {
		withLazyTLS(t, stranger)
		ctr, _ := runCounter(t, c)
		lc := startLazyCheckpoint(t, c, bin, ctr.Pod, "counter", source)
		restored := restorePod(t, c, filepath.Base(lc.path))
		rctr, err := createRaw(t, c, restored, "counter", counter, 0)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		_, err = c.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: rctr.ID})
		cancel()
		if err == nil {
			t.Fatal("a target with another CA's certificate restored the container")
		}
		t.Logf("refused: %v", err)
		if _, err := os.Stat(filepath.Join(c.RuntimeRoot(Handler), rctr.ID)); err == nil {
			t.Errorf("the runtime keeps state of the refused container")
		}
		// CRIU killed mid-restore leaves the tasks it was restoring in
		// the container's cgroup; the refusal kills them.
		cgroup := restored.Config.Linux.CgroupParent + "/" + rctr.ID
		testutil.Eventually(t, "no process is left in the refused container's cgroup "+cgroup, func() error {
			return cgroupEmpty(t, cgroup)
		})
		checkNothingLeft(t)
		// The source's CRIU fails the handshake too, or the cancel ends it.
		lc.cancel()
		if err := <-lc.done; err == nil {
			t.Error("the lazy pod checkpoint succeeded although nobody fetched its memory")
		}
		// The original is left running, as it was.
		waitCount(t, ctr, count(t, ctr))
	})

	t.Run("no lazyTLS", func(t *testing.T) {
		ctr, _ := runCounter(t, c)
		lc := startLazyCheckpoint(t, c, bin, ctr.Pod, "counter", source)
		restored := restorePod(t, c, filepath.Base(lc.path))
		rctr, err := createRaw(t, c, restored, "counter", counter, 0)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, err = c.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: rctr.ID})
		if err == nil || !strings.Contains(err.Error(), "no lazyTLS") {
			t.Fatalf("start = %v; want a refusal naming lazyTLS", err)
		}
		checkNothingLeft(t)
	})
}

// cgroupEmpty fails when a process is in the cgroup rel (a path below
// each hierarchy's root) or below it, in any cgroup hierarchy mounted on
// this host; a hierarchy without the cgroup holds none.
func cgroupEmpty(t *testing.T, rel string) error {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	mounts, err := mountinfo.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	var busy []string
	for _, m := range mounts {
		if m.FSType != "cgroup" && m.FSType != "cgroup2" || m.Root != "/" {
			continue
		}
		_ = filepath.WalkDir(filepath.Join(m.Point, rel), func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if procs, err := os.ReadFile(filepath.Join(p, "cgroup.procs")); err == nil && len(strings.TrimSpace(string(procs))) > 0 {
				busy = append(busy, fmt.Sprintf("%s: %s", p, strings.Join(strings.Fields(string(procs)), " ")))
			}
			return nil
		})
	}
	if len(busy) > 0 {
		return fmt.Errorf("processes left: %s", strings.Join(busy, "; "))
	}
	return nil
}
