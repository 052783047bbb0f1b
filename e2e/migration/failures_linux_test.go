package migration_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/cluster/apis/v1alpha1"
	"github.com/nodeshim/nodeshim/cluster/kubectl"
	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/criu/workentry"
	"github.com/nodeshim/nodeshim/testenv/clustertest"
	"github.com/nodeshim/nodeshim/testenv/migrationtest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// The failures below (TestPodMigrations runs them): a migration that fails
// between two real nodes leaves the original pod running on the source,
// makes no restored pod, says in the PodMigration which step failed and
// why, and leaves nothing half-written on either node.

// migrateAsync creates the PodMigration name of pod to the target with
// the plugin, without waiting; args are more of the plugin's flags.
func migrateAsync(t *testing.T, p *migrationtest.Pair, pod, name string, args ...string) {
	t.Helper()
	var out bytes.Buffer
	if err := kubectl.Run(context.Background(), append([]string{"migrate", pod, "--to", p.Target.Name, "--delete-original", "--name", name, "--wait=false"}, args...),
		kubectl.Env{Stdout: &out, Stderr: &out, Config: p.Cluster.API.AdminConfig(), Namespace: "default"}); err != nil {
		t.Fatalf("kubectl nodeshim migrate: %v\n%s", err, out.String())
	}
}

// failedAt waits until the PodMigration name failed, and returns the
// condition of the step that did.
func failedAt(t *testing.T, p *migrationtest.Pair, name string) condition.Condition {
	t.Helper()
	var m *v1alpha1.PodMigration
	testutil.Eventually(t, "PodMigration "+name+" Failed", func() error {
		var err error
		if m, err = p.Admin.GetPodMigration(context.Background(), "default", name); err != nil {
			return err
		}
		if m.Status.Phase != v1alpha1.MigrationFailed {
			return fmt.Errorf("phase %q: %+v", m.Status.Phase, m.Status.Conditions)
		}
		return nil
	})
	for _, c := range m.Status.Conditions {
		if c.Type != v1alpha1.ConditionReady && c.Status == condition.False && c.Severity == condition.SeverityError {
			return c
		}
	}
	t.Fatalf("PodMigration %s failed with no failed step: %+v", name, m.Status.Conditions)
	return condition.Condition{}
}

// runsOn checks that the original pod still runs on the source and its
// container ctr counts on, and that no restored pod exists.
func runsOn(t *testing.T, p *migrationtest.Pair, pod, ctr, migration string) {
	t.Helper()
	ctx := context.Background()
	got, err := p.Clients.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
	if err != nil || got.DeletionTimestamp != nil || got.Status.Phase != corev1.PodRunning {
		t.Fatalf("the original pod %s: %v (deleting %v, phase %s)", pod, err, got.DeletionTimestamp, got.Status.Phase)
	}
	n := p.Cluster.Count(t, pod, ctr, 0)
	p.Cluster.Count(t, pod, ctr, n) // it advances: not left frozen
	pods, err := p.Clients.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range pods.Items {
		if q.Annotations[v1alpha1.AnnotationMigration] == migration {
			t.Errorf("a restored pod %s exists on %s", q.Name, q.Spec.NodeName)
		}
	}
}

// criuUnder returns the pid of a CRIU process that descends from pid, or
// 0. CRIU may run through a loader (the wrapper execs ld.so with criu's
// path as an argument), so its command line names it.
func criuUnder(pid int) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil || !isCriu(child) {
			continue
		}
		for q, hops := child, 0; q > 1 && hops < 16; hops++ {
			if q == pid {
				return child
			}
			q = parent(q)
		}
	}
	return 0
}

// isCriu reports whether pid runs criu: its own name, or one of the
// first arguments of its loader.
func isCriu(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return false
	}
	args := strings.Split(string(b), "\x00")
	for i := 0; i < len(args) && i < 4; i++ {
		if filepath.Base(args[i]) == "criu" {
			return true
		}
	}
	return false
}

// poll calls cond every 10 ms until it holds, failing t with what near
// go test's -timeout: for a state that lasts only a moment, which
// testutil.Eventually's growing interval could miss.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline, ok := t.Deadline()
	for !cond() {
		if ok && time.Until(deadline) < 30*time.Second {
			t.Fatalf("%s: not seen", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// parent is pid's parent pid, or 0.
func parent(pid int) int {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// testSourceKilled: the source's serve is SIGKILLed while CRIU dumps the
// pod. The migration fails at its checkpoint; the pod runs on, thawed;
// the restarted serve leaves nothing of the dump behind.
func testSourceKilled(t *testing.T, p *migrationtest.Pair) {
	pod := workloadPod("ledger", p.Source.Name, 128)
	p.RunPod(t, pod)
	p.Cluster.Count(t, pod.Name, workContainer, 2)
	migrateAsync(t, p, pod.Name, "ledger-move")
	var dumper int
	poll(t, "CRIU dumping under the source's serve", func() bool {
		dumper = criuUnder(p.Source.Serve.Pid())
		return dumper != 0
	})
	p.Source.Serve.Kill()
	t.Logf("serve of %s killed while criu %d dumped", p.Source.Name, dumper)
	c := failedAt(t, p, "ledger-move")
	t.Logf("%s: %s: %s", c.Type, c.Reason, c.Message)
	if c.Type != v1alpha1.ConditionCheckpointed {
		t.Errorf("failed at %s, want %s", c.Type, v1alpha1.ConditionCheckpointed)
	}
	p.Source.RestartServe(t, "")
	runsOn(t, p, pod.Name, workContainer, "ledger-move")
	p.DeleteMigration(t, "ledger-move")
	clustertest.DeletePod(t, p.Clients, pod.Name)
}

// testTargetKilled: the target's serve is SIGKILLed while it receives the
// pod checkpoint (a node lost mid-transfer). The migration fails at its
// transfer; the pod runs on at the source; the restarted target holds
// nothing of the cut stream.
func testTargetKilled(t *testing.T, p *migrationtest.Pair) {
	pod := workloadPod("till", p.Source.Name, 128)
	p.RunPod(t, pod)
	p.Cluster.Count(t, pod.Name, workContainer, 2)
	migrateAsync(t, p, pod.Name, "till-move")
	poll(t, "the target receiving into its work entry", func() bool {
		for _, name := range p.Target.Checkpoints(t) {
			if strings.HasPrefix(name, workentry.WorkPrefix) {
				return true
			}
		}
		return false
	})
	p.Target.Serve.Kill()
	t.Logf("serve of %s killed while it received: %v", p.Target.Name, p.Target.Checkpoints(t))
	c := failedAt(t, p, "till-move")
	t.Logf("%s: %s: %s", c.Type, c.Reason, c.Message)
	if c.Type != v1alpha1.ConditionTransferred {
		t.Errorf("failed at %s, want %s", c.Type, v1alpha1.ConditionTransferred)
	}
	runsOn(t, p, pod.Name, workContainer, "till-move")
	p.Target.RestartServe(t, "")
	p.DeleteMigration(t, "till-move")
	clustertest.DeletePod(t, p.Clients, pod.Name)
	waitLabel(t, p, v1alpha1.LabelTransferPort, strconv.Itoa(p.Target.TransferPort(t)))
}

// testTargetKeyRefused: the target's serve comes back with a new
// identity, which its reporter publishes, and which the source is not
// configured to encrypt to. The source's shim refuses to send; the pod
// runs on. The same for a Lazy move, whose source keeps the pod frozen
// while it serves the memory: the failed migration's lazy PodCheckpoint
// is deleted, and the source gives the pod back, thawed.
func testTargetKeyRefused(t *testing.T, p *migrationtest.Pair) {
	other, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	id := filepath.Join(t.TempDir(), "other.age")
	if err := os.WriteFile(id, []byte(other.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p.Target.RestartServe(t, "  trustPolicy: "+p.Target.TrustPolicy+"\n  encryption:\n    identities: ["+id+"]\n  transfer:\n    enabled: true\n")
	defer func() {
		p.Target.RestartServe(t, "")
		waitLabel(t, p, v1alpha1.LabelTransferRecipient, p.Target.Keys.Recipient)
	}()
	waitLabel(t, p, v1alpha1.LabelTransferRecipient, other.Recipient().String())
	for _, mode := range []v1alpha1.MigrationMode{v1alpha1.ModeStopAndCopy, v1alpha1.ModeLazy} {
		pod := migrationtest.CounterPod("kiosk-"+strings.ToLower(string(mode)), p.Source.Name)
		p.RunPod(t, pod)
		name := pod.Name + "-move"
		migrateAsync(t, p, pod.Name, name, "--mode", string(mode))
		c := failedAt(t, p, name)
		t.Logf("%s: %s: %s: %s", mode, c.Type, c.Reason, c.Message)
		if c.Type != v1alpha1.ConditionTransferred || !strings.Contains(c.Message, "is not among this node's checkpoint.encryption.recipients") {
			t.Errorf("%s: failed at %s: %s", mode, c.Type, c.Message)
		}
		runsOn(t, p, pod.Name, migrationtest.Containers[0], name)
		p.DeleteMigration(t, name)
		clustertest.DeletePod(t, p.Clients, pod.Name)
	}
}

// waitLabel waits until the target's Node carries label=value.
func waitLabel(t *testing.T, p *migrationtest.Pair, label, value string) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("%s=%s on %s", label, value, p.Target.Name), func() error {
		n, err := p.Clients.CoreV1().Nodes().Get(context.Background(), p.Target.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n.Labels[label] != value {
			return fmt.Errorf("%s=%q", label, n.Labels[label])
		}
		return nil
	})
}
