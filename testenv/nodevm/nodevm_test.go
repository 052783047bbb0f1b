package nodevm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/testenv/vmtest"
)

func TestParseResults(t *testing.T) {
	tests := []struct {
		name                    string
		out                     string
		passed, failed, skipped int
		journal                 string
	}{
		{
			name: "passes and a failure with subtests",
			out: "=== RUN   TestA\n--- PASS: TestA (1.50s)\n=== RUN   TestB\n    x_test.go:3: boom\n--- FAIL: TestB (0.01s)\n" +
				"=== RUN   TestC\n=== RUN   TestC/sub\n    --- PASS: TestC/sub (0.00s)\n--- PASS: TestC (2.00s)\nFAIL\n",
			passed: 2, failed: 1,
		},
		{
			name:   "a skip, then the journal, whose lines are not verdicts",
			out:    "--- SKIP: TestS (0.00s)\n" + JournalMarker + "\n--- PASS: TestNot (1.00s)\nNov 28 containerd[1]: started\n",
			passed: 0, skipped: 1, journal: "--- PASS: TestNot (1.00s)\nNov 28 containerd[1]: started\n",
		},
		{name: "nothing ran", out: "panic: boom\n"},
		{name: "a test the node stopped in", out: "=== RUN   TestA\n--- PASS: TestA (1.00s)\n=== RUN   TestB\n=== RUN   TestB/x\n    b_test.go:9: waiting\n", passed: 1, failed: 1},
		{name: "a verdict line cut by the kernel", out: "--- PASS: TestA (1.5\n--- PASS: TestB (0.25s)\n", passed: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ParseResults([]byte(tt.out))
			p, f, s := r.Counts()
			if p != tt.passed || f != tt.failed || s != tt.skipped {
				t.Errorf("counts %d passed, %d failed, %d skipped; want %d, %d, %d", p, f, s, tt.passed, tt.failed, tt.skipped)
			}
			if r.Journal != tt.journal {
				t.Errorf("journal %q, want %q", r.Journal, tt.journal)
			}
		})
	}
	r := ParseResults([]byte("--- PASS: TestA (1.50s)\n"))
	if len(r.Tests) != 1 || r.Tests[0].Name != "TestA" || r.Tests[0].Duration != 1500*time.Millisecond {
		t.Errorf("tests %+v, want TestA in 1.5s", r.Tests)
	}
}

func FuzzParseResults(f *testing.F) {
	f.Add([]byte("--- PASS: TestA (1.50s)\n" + JournalMarker + "\nx"))
	f.Add([]byte("    --- FAIL: TestA/b (0.00s)\n--- FAIL: TestA (9.99s)\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := ParseResults(b)
		p, fl, s := r.Counts()
		if p+fl+s > len(r.Tests) {
			t.Fatalf("counts %d+%d+%d above %d verdicts", p, fl, s, len(r.Tests))
		}
		if len(r.Output)+len(r.Journal) > len(b) {
			t.Fatalf("output and journal longer than the input")
		}
	})
}

func TestTimesParseTime(t *testing.T) {
	tests := []struct {
		line string
		ok   bool
		what string
		secs float64
	}{
		{TimeMarker + " time containerd-ready 41.52", true, "containerd-ready", 41.52},
		{"[   3.1] x " + TimeMarker + " time switch-root 3.10", true, "switch-root", 3.1},
		{TimeMarker + " time containerd-ready", false, "", 0},
		{TimeMarker + " time x -1", false, "", 0},
		{TimeMarker + " when x 1", false, "", 0},
		{"time x 1", false, "", 0},
	}
	for _, tt := range tests {
		times := Times{}
		if ok := times.ParseTime(tt.line); ok != tt.ok || (ok && times[tt.what] != tt.secs) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v, %s=%v", tt.line, ok, times, tt.ok, tt.what, tt.secs)
		}
	}
}

// TestNodeFiles checks the node's configuration as the node's programs
// read it: containerd on the systemd cgroup driver with runc and CRIU,
// every unit nodeshim's scenarios need enabled, the units each masked.
func TestNodeFiles(t *testing.T) {
	files := NodeFiles("0123", "localhost/p:t", "10m", []string{"overlay", "bridge"})
	byPath := map[string]File{}
	for _, f := range files {
		if _, dup := byPath[f.Path]; dup {
			t.Errorf("%s written twice", f.Path)
		}
		byPath[f.Path] = f
		if !filepath.IsAbs(f.Path) {
			t.Errorf("%s is not absolute", f.Path)
		}
	}
	cfg := byPath["/etc/containerd/config.toml"].Data
	for _, want := range []string{"version = 3", "SystemdCgroup = true", `BinaryName = "/usr/local/bin/runc"`,
		"enable_criu = true", "enable_experimental_restore_via_create = true", `sandbox = "localhost/p:t"`,
		`BinaryName = "/opt/nodeshim/bin/nodeshim-runc"`, `pod_annotations = ["restore.nodeshim.io/checkpoint"]`} {
		if !strings.Contains(cfg, want) {
			t.Errorf("containerd config lacks %q", want)
		}
	}
	for _, unit := range []string{"containerd.service", "nodeshim.service", "nodeshim-node-tests.service"} {
		link, ok := byPath["/etc/systemd/system/multi-user.target.wants/"+unit]
		if !ok || link.Link != "/etc/systemd/system/"+unit {
			t.Errorf("%s is not enabled: %+v", unit, link)
		}
		if _, ok := byPath[link.Link]; !ok {
			t.Errorf("%s is enabled but not written", unit)
		}
	}
	for _, u := range MaskedUnits() {
		if f := byPath["/etc/systemd/system/"+u]; f.Link != "/dev/null" {
			t.Errorf("%s not masked: %+v", u, f)
		}
	}
	if got := byPath["/etc/modules-load.d/nodeshim-node.conf"].Data; got != "overlay\nbridge\n" {
		t.Errorf("modules-load.d: %q", got)
	}
	if !strings.Contains(byPath[NodeLib+"/run"].Data, "-test.timeout 10m") {
		t.Errorf("the runner does not pass the test timeout")
	}
}

// TestRunnerMarkers checks that every marker the runner and the init
// script print is one vmtest.Console parses, so that a setup failure is
// reported as such and not as an unparsed line.
func TestRunnerMarkers(t *testing.T) {
	script := RunnerScript("1m") + InitScript([]string{"ext4"})
	var c vmtest.Console
	times := Times{}
	for _, line := range strings.Split(script, "\n") {
		for _, m := range []string{`"$M `, `"$T `, vmtest.Marker + " ", TimeMarker + " "} {
			i := strings.Index(line, m)
			if i < 0 {
				continue
			}
			text := strings.NewReplacer(`"$M `, vmtest.Marker+" ", `"$T `, TimeMarker+" ", `$(up)"`, "1.5", "$rc", "0",
				`$(cut -d' ' -f1 /proc/uptime)"`, "2.5", "$*", "why", `"`, "").Replace(line[i:])
			c.Line(text)
			times.ParseTime(text)
		}
	}
	if len(c.Unparsed) != 0 {
		t.Errorf("markers vmtest.Console does not parse: %q", c.Unparsed)
	}
	for _, want := range []string{"runner-start", "containerd-ready", "nodeshim-ready", "tests-done", "switch-root"} {
		if _, ok := times[want]; !ok {
			t.Errorf("no time marker %s (have %v)", want, times)
		}
	}
	if !c.Done || c.Exit[TestName] != 0 || len(c.Begun) != 1 {
		t.Errorf("console %+v: want the scenarios begun, ended and done", c)
	}
}

// TestWriteNodeFileLeavesTheRootfsAlone checks that a node file written
// over a hard-linked rootfs file replaces the link, not the cached file.
func TestWriteNodeFileLeavesTheRootfsAlone(t *testing.T) {
	dir := t.TempDir()
	cached := filepath.Join(dir, "cached")
	if err := os.WriteFile(cached, []byte("cached\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stage := filepath.Join(dir, "stage")
	if err := os.MkdirAll(filepath.Join(stage, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(cached, filepath.Join(stage, "etc", "hostname")); err != nil {
		t.Fatal(err)
	}
	if err := writeNodeFile(stage, File{Path: "/etc/hostname", Mode: 0o644, Data: "node\n"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(cached); string(b) != "cached\n" {
		t.Errorf("the cached file became %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(stage, "etc", "hostname")); string(b) != "node\n" {
		t.Errorf("the node file is %q", b)
	}
}
