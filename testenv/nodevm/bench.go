package nodevm

import (
	"fmt"
	"strings"
)

// shellUnsafe are the characters a benchmark pattern, time or environment
// value cannot carry into the runner script.
const shellUnsafe = "'\"`$\\ ;&|<>()\n"

// BenchRunnerScript is RunnerScript for a run of benchmarks instead of
// the scenarios: -test.run '^$', -test.bench pattern, -test.benchtime
// benchtime ("3x" when empty), env's KEY=VALUE pairs and TMPDIR=/var/tmp
// (the node's disk: trixie's /tmp is a tmpfs, which a checkpoint's images
// would take from the memory the benchmark measures).
func BenchRunnerScript(timeout, pattern, benchtime string, env []string) (string, error) {
	if benchtime == "" {
		benchtime = "3x"
	}
	check := func(what, v string) error {
		if v == "" || strings.ContainsAny(v, shellUnsafe) {
			return fmt.Errorf("-%s %q: empty, or quotes, spaces and shell characters that cannot go into the runner", what, v)
		}
		return nil
	}
	if err := check("bench", pattern); err != nil {
		return "", err
	}
	if err := check("benchtime", benchtime); err != nil {
		return "", err
	}
	vars := []string{"TMPDIR=/var/tmp"}
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if err := check("bench-env", kv); err != nil || !ok || k == "" {
			return "", fmt.Errorf("-bench-env %q: want KEY=VALUE without shell characters", kv)
		}
		vars = append(vars, kv)
	}
	s := RunnerScript(timeout)
	const guest = "NODESHIM_GUEST=node"
	if !strings.Contains(s, guest) || !strings.Contains(s, "-test.count=1") {
		return "", fmt.Errorf("the runner script has no %s or -test.count=1 to extend", guest)
	}
	s = strings.Replace(s, guest, strings.Join(vars, " ")+" "+guest, 1)
	return strings.Replace(s, "-test.count=1", "-test.count=1 -test.run '^$' -test.bench '"+pattern+"' -test.benchtime "+benchtime, 1), nil
}

// BenchPassed reports whether a benchmark run's output (Results.Output)
// holds at least one benchmark's result and go test's closing PASS.
func BenchPassed(out string) bool {
	var result, pass bool
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "Benchmark") && strings.Contains(line, " ns/op") {
			result = true
		}
		if line == "PASS" {
			pass = true
		}
		if strings.HasPrefix(line, "--- FAIL") || line == "FAIL" {
			return false
		}
	}
	return result && pass
}
