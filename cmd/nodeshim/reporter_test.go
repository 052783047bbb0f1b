package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/cluster/reporter"
	"github.com/nodeshim/nodeshim/deploy"
	"github.com/nodeshim/nodeshim/testenv/kubetest"
	"github.com/nodeshim/nodeshim/testenv/testproc"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

func TestReporterUsage(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no node name", []string{"reporter", "--namespace", "x"}, "--node-name"},
		{"no namespace", []string{"reporter", "--node-name", "n"}, "--namespace"},
	}
	t.Setenv("NODE_NAME", "")
	t.Setenv("POD_NAMESPACE", "")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, tc.args...)
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != exitUsage || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a usage error naming %s", err, tc.want)
			}
		})
	}
}

// e2e is nodeshim serve and nodeshim reporter, the real binaries, against
// a real API server, the reporter with the ServiceAccount token of
// deploy/'s RBAC.
type e2e struct {
	cluster  *kubetest.Cluster
	node     string
	reporter *exec.Cmd
	metrics  string
}

// startE2E runs nodeshim serve and a reporter against a real API server:
// with thin, the nodeshim-reporter binary built as the image ships it
// (stripped); otherwise `nodeshim reporter`.
func startE2E(t testing.TB, thin bool) *e2e {
	testutil.RequireRoot(t)
	gobin := testutil.RequireBinary(t, "go")
	c := kubetest.Start(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "nodeshim")
	if out, err := exec.Command(gobin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	reporterCmd := []string{bin, "reporter"}
	if thin {
		rbin := filepath.Join(dir, "nodeshim-reporter")
		build := exec.Command(gobin, "build", "-trimpath", "-ldflags=-s -w", "-o", rbin, "../nodeshim-reporter")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build nodeshim-reporter: %v\n%s", err, out)
		}
		reporterCmd = []string{rbin}
	}
	rbac, err := deploy.ReporterAccess()
	if err != nil {
		t.Fatal(err)
	}
	c.MustApply(t, rbac)
	kubeconfig := c.Kubeconfig(t, "nodeshim-reporter", c.ServiceAccountConfig(t, "nodeshim", "nodeshim-reporter"))
	e := &e2e{cluster: c, node: "node-e2e"}
	admin := c.AdminClient(t)
	if _, err := admin.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: e.node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	root := filepath.Join(dir, "root")
	serve := exec.Command(bin, "serve", "--root-dir", root, "--lock-file", filepath.Join(dir, "nodeshim.lock"), "--host-root", filepath.Join(dir, "host"))
	serve.Stdout, serve.Stderr = io.Discard, io.Discard
	served, err := testproc.StartHeld(serve)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { serve.Process.Signal(syscall.SIGTERM); <-served })

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.metrics = l.Addr().String()
	l.Close()
	logPath := filepath.Join(dir, "reporter.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	e.reporter = exec.Command(reporterCmd[0], append(reporterCmd[1:], "--node-name", e.node, "--namespace", "nodeshim",
		"--kubeconfig", kubeconfig, "--socket", filepath.Join(root, "nodeshim.sock"), "--metrics-addr", e.metrics)...)
	e.reporter.Stdout, e.reporter.Stderr = logf, logf
	reported, err := testproc.StartHeld(e.reporter)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.reporter.Process.Signal(syscall.SIGTERM)
		err := <-reported
		logf.Close()
		if err != nil {
			t.Errorf("reporter exited with %v", err)
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("reporter log:\n%s", b)
		}
	})
	return e
}

// waitNode polls the Node until ok holds (go test's -timeout bounds it).
func (e *e2e) waitNode(t testing.TB, ok func(*corev1.Node) bool) *corev1.Node {
	admin := e.cluster.AdminClient(t)
	for {
		n, err := admin.CoreV1().Nodes().Get(context.Background(), e.node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ok(n) {
			return n
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// scrape returns the reporter's /metrics samples by name{labels}.
func (e *e2e) scrape(t testing.TB) map[string]float64 {
	resp, err := http.Get("http://" + e.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

func hasCondition(n *corev1.Node, typ corev1.NodeConditionType) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == typ {
			return true
		}
	}
	return false
}

// TestReporterEndToEnd runs nodeshim serve and nodeshim reporter and checks
// the Node, the Lease and the metrics endpoint with the shim's metrics
// relayed.
func TestReporterEndToEnd(t *testing.T) {
	for _, thin := range []bool{true, false} {
		t.Run(map[bool]string{true: "nodeshim-reporter", false: "nodeshim reporter"}[thin], func(t *testing.T) {
			testReporterEndToEnd(t, thin)
		})
	}
}

func testReporterEndToEnd(t *testing.T, thin bool) {
	e := startE2E(t, thin)
	n := e.waitNode(t, func(n *corev1.Node) bool {
		return hasCondition(n, reporter.TypeNodeShimReady) && hasCondition(n, "NodeShimConfigHealthy") &&
			n.Annotations[reporter.AnnotationDigest] != ""
	})
	for _, c := range n.Status.Conditions {
		if reporter.KubeletOwned(c.Type) {
			t.Errorf("reporter wrote kubelet's %s", c.Type)
		}
	}
	// The Lease and its first renewal may come after the status write
	// that waitNode saw.
	admin := e.cluster.AdminClient(t)
	var m map[string]float64
	testutil.Eventually(t, "the reporter has its Lease renewed and the shim up", func() error {
		if _, err := admin.CoordinationV1().Leases("nodeshim").Get(context.Background(), e.node, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("lease: %w", err)
		}
		m = e.scrape(t)
		if m[`nodeshim_reporter_shim_up`] != 1 || m[`nodeshim_reporter_lease_renewals_total`] < 1 {
			return fmt.Errorf("shim_up %v, lease renewals %v", m[`nodeshim_reporter_shim_up`], m[`nodeshim_reporter_lease_renewals_total`])
		}
		return nil
	})
	for _, name := range []string{
		`nodeshim_reporter_lease_renewals_total`,
		`nodeshim_reporter_api_writes_total{kind="status"}`,
		`nodeshim_reporter_shim_up`,
		`nodeshim_condition{status="True",type="ConfigHealthy"}`, // relayed from the shim
		`process_resident_memory_bytes`,
	} {
		if _, ok := m[name]; !ok {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	// Published and renewed (both seen above): the readiness probe's
	// endpoint says so.
	resp, err := http.Get("http://" + e.metrics + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz = %d %s after the status was published and the Lease renewed", resp.StatusCode, body)
	}
}

// vmRSS reads a process's resident set size in bytes from /proc.
func vmRSS(pid int, field string) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// BenchmarkReporterFootprint measures the real reporter idle against a real
// API server, the nodeshim-reporter binary (stripped, as the image ships
// it) and `nodeshim reporter` one after the other: its RSS (current and
// peak) and its API writes per 10 s over NODESHIM_FOOTPRINT_WINDOW (default
// 60s) of wall-clock time after the first publish. One iteration is one
// window, whatever b.N is.
func BenchmarkReporterFootprint(b *testing.B) {
	b.Run("nodeshim-reporter", func(b *testing.B) { benchmarkReporterFootprint(b, true) })
	b.Run("nodeshim_reporter", func(b *testing.B) { benchmarkReporterFootprint(b, false) })
}

func benchmarkReporterFootprint(b *testing.B, thin bool) {
	window := time.Minute
	if v := os.Getenv("NODESHIM_FOOTPRINT_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatal(err)
		}
		window = d
	}
	e := startE2E(b, thin)
	e.waitNode(b, func(n *corev1.Node) bool { return n.Annotations[reporter.AnnotationDigest] != "" })
	// The shim's sources settle in the first seconds: measure "nothing
	// changes" from the first 5 s without a status write.
	for last, since := -1.0, time.Now(); time.Since(since) < 5*time.Second; time.Sleep(500 * time.Millisecond) {
		if w := e.scrape(b)[`nodeshim_reporter_api_writes_total{kind="status"}`]; w != last {
			last, since = w, time.Now()
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	writes := func(m map[string]float64) float64 {
		return m[`nodeshim_reporter_api_writes_total{kind="status"}`] + m[`nodeshim_reporter_api_writes_total{kind="lease"}`] + m[`nodeshim_reporter_api_writes_total{kind="event"}`]
	}
	m0 := e.scrape(b)
	before := writes(m0)
	start := time.Now()
	time.Sleep(window)
	elapsed := time.Since(start)
	after := e.scrape(b)
	b.StopTimer()
	rss, err := vmRSS(e.reporter.Process.Pid, "VmRSS")
	if err != nil {
		b.Fatal(err)
	}
	hwm, err := vmRSS(e.reporter.Process.Pid, "VmHWM")
	if err != nil {
		b.Fatal(err)
	}
	anon, err := vmRSS(e.reporter.Process.Pid, "RssAnon")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(rss/(1<<20), "rss-MiB")
	// RSS less RssAnon is the binary's text and data pages, file-backed
	// and shared with every other process of the same image.
	b.ReportMetric(anon/(1<<20), "rss-anon-MiB")
	b.ReportMetric(hwm/(1<<20), "peak-rss-MiB")
	b.ReportMetric((writes(after)-before)/elapsed.Seconds()*10, "writes/10s")
	for _, k := range []string{"status", "lease", "event"} {
		name := `nodeshim_reporter_api_writes_total{kind="` + k + `"}`
		b.ReportMetric(after[name]-m0[name], k+"-writes")
	}
	b.ReportMetric(after["go_memstats_heap_inuse_bytes"]/(1<<20), "heap-inuse-MiB")
	b.ReportMetric(after["go_memstats_sys_bytes"]/(1<<20), "go-sys-MiB")
	b.ReportMetric((after["process_cpu_seconds_total"]-m0["process_cpu_seconds_total"])/elapsed.Seconds()*100, "cpu-%")
}
