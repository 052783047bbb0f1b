package nodevm

import (
	"strings"
	"testing"
)

// TestBenchRunnerScript: the runner of a benchmark run runs no scenario,
// the benchmarks matching the pattern for the benchtime, with the
// environment given and TMPDIR on the node's disk; what could break out
// of the script is refused, naming the flag.
func TestBenchRunnerScript(t *testing.T) {
	s, err := BenchRunnerScript("10m", "BenchmarkPreDump", "", []string{"NODESHIM_PREDUMP_MIB=1024"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"TMPDIR=/var/tmp NODESHIM_PREDUMP_MIB=1024 NODESHIM_GUEST=node",
		"-test.count=1 -test.run '^$' -test.bench 'BenchmarkPreDump' -test.benchtime 3x",
		"-test.timeout 10m",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("runner lacks %q:\n%s", want, s)
		}
	}
	for _, tc := range []struct {
		pattern, benchtime string
		env                []string
		flag               string
	}{
		{"", "", nil, "-bench"},
		{"Benchmark'; reboot; '", "", nil, "-bench"},
		{"BenchmarkPreDump", "3x $(reboot)", nil, "-benchtime"},
		{"BenchmarkPreDump", "", []string{"NODESHIM_PREDUMP_MIB"}, "-bench-env"},
		{"BenchmarkPreDump", "", []string{"A=b c"}, "-bench-env"},
		{"BenchmarkPreDump", "", []string{"=1"}, "-bench-env"},
	} {
		if _, err := BenchRunnerScript("10m", tc.pattern, tc.benchtime, tc.env); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("BenchRunnerScript(%q, %q, %q) = %v; want an error naming %s", tc.pattern, tc.benchtime, tc.env, err, tc.flag)
		}
	}
}

func TestBenchPassed(t *testing.T) {
	const result = "BenchmarkPreDump/1024MiB/pre-dump-0-2 \t 3\t37325516685 ns/op\t 23954 frozen-ms\n"
	for _, tc := range []struct {
		name, out string
		want      bool
	}{
		{"a result and PASS", "goos: linux\n" + result + "PASS\n", true},
		{"no result", "goos: linux\nPASS\n", false},
		{"no PASS (killed)", result, false},
		{"a benchmark failed", result + "--- FAIL: BenchmarkPreDump/x\nFAIL\n", false},
		{"a skip counted as a failure", result + "--- FAIL: BenchmarkPreDump\n    skip under NODESHIM_REQUIRE_PRIVILEGED\nFAIL\n", false},
	} {
		if got := BenchPassed(tc.out); got != tc.want {
			t.Errorf("%s: BenchPassed = %v; want %v", tc.name, got, tc.want)
		}
	}
}
