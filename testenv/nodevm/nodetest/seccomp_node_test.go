//go:build nodevm

package nodetest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/nodevm"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// seccompRoot is the kubelet's seccomp root on the node (nodeshim's
// default kubeletRootDir).
const seccompRoot = "/var/lib/kubelet/seccomp"

// TestSeccompLocalhostProfileEnforced: the Localhost profile in nodeshim
// serve's configuration (nodevm.DenyMkdirProfile: allow all but mkdir and
// mkdirat, which fail with EPERM) is installed under the kubelet's seccomp
// root and listed in GET /status; a CRI container whose security context
// names it, as kubelet passes a Localhost profile, runs under it with each
// runtime handler of the node (runc 1.5 and crun): the workload runs and
// writes a file, its mkdir fails with EPERM and creates nothing, and its
// process is in seccomp filter mode.
func TestSeccompLocalhostProfileEnforced(t *testing.T) {
	requireNode(t)
	path := filepath.Join(seccompRoot, nodevm.DenyMkdirProfile)
	testutil.Eventually(t, "GET /status lists "+nodevm.DenyMkdirProfile+" installed", func() error {
		var doc status.Document
		if err := getJSON(t, "/status", &doc); err != nil {
			return err
		}
		if doc.SeccompProfiles == nil {
			return fmt.Errorf("no seccompProfiles in the status yet")
		}
		for _, p := range doc.SeccompProfiles.Installed {
			if p.Name == nodevm.DenyMkdirProfile {
				if p.Path != path {
					return fmt.Errorf("%s installed at %s, want %s", p.Name, p.Path, path)
				}
				_, err := os.Stat(path)
				return err
			}
		}
		return fmt.Errorf("installed: %+v", doc.SeccompProfiles.Installed)
	})
	for _, handler := range []string{"runc", "crun"} {
		t.Run(handler, func(t *testing.T) {
			start := time.Now()
			p := runPodOn(t, "seccomp-"+handler, handler)
			var sandbox struct {
				Status struct {
					RuntimeHandler string `json:"runtimeHandler"`
				} `json:"status"`
			}
			if err := json.Unmarshal([]byte(run(t, crictlBin, "inspectp", "-o", "json", p.ID)), &sandbox); err != nil {
				t.Fatalf("crictl inspectp %s: %v", p.ID, err)
			}
			if sandbox.Status.RuntimeHandler != handler {
				t.Errorf("pod %s runs on handler %q, want %s", p.Name, sandbox.Status.RuntimeHandler, handler)
			}
			c := p.runContainer(t, containerOptions{Name: "probe", SeccompLocalhost: path,
				Command: []string{"sh", "-c", `{ echo allowed > /allowed && echo wrote; mkdir /denied; echo "mkdir rc=$?"; } > /result 2>&1; sleep 3600`}})
			var result string
			testutil.Eventually(t, "the probe's /result", func() error {
				out, err := runErr(crictlBin, "exec", c.ID, "cat", "/result")
				if err != nil {
					return err
				}
				if !strings.Contains(out, "mkdir rc=") {
					return fmt.Errorf("/result so far %q", out)
				}
				result = out
				return nil
			})
			if !strings.Contains(result, "wrote") {
				t.Errorf("%s: the allowed workload did not run under the profile: %q", handler, result)
			}
			if !strings.Contains(result, "Operation not permitted") || strings.Contains(result, "mkdir rc=0") {
				t.Errorf("%s: mkdir under %s: %q; want EPERM (Operation not permitted)", handler, nodevm.DenyMkdirProfile, result)
			}
			if out, err := runErr(crictlBin, "exec", c.ID, "ls", "-d", "/denied"); err == nil {
				t.Errorf("%s: /denied exists in the container (%q) though mkdir is denied", handler, out)
			}
			out := run(t, crictlBin, "inspect", "-o", "json", c.ID)
			var in struct {
				Info struct {
					Pid            int             `json:"pid"`
					RuntimeOptions json.RawMessage `json:"runtimeOptions"`
					RuntimeSpec    struct {
						Linux struct {
							Seccomp *struct {
								DefaultAction string `json:"defaultAction"`
							} `json:"seccomp"`
						} `json:"linux"`
					} `json:"runtimeSpec"`
				} `json:"info"`
			}
			if err := json.Unmarshal([]byte(out), &in); err != nil {
				t.Fatalf("crictl inspect %s: %v", c.ID, err)
			}
			// The handler's runtime binary, as containerd's shim runs it.
			if opts := string(in.Info.RuntimeOptions); strings.Contains(opts, "/usr/bin/crun") != (handler == "crun") {
				t.Errorf("%s: container's runtime options %s", handler, opts)
			}
			t.Logf("%s: runtime options %s", handler, in.Info.RuntimeOptions)
			if s := in.Info.RuntimeSpec.Linux.Seccomp; s == nil || s.DefaultAction != "SCMP_ACT_ALLOW" {
				t.Errorf("%s: OCI spec seccomp %+v; want the profile's (defaultAction SCMP_ACT_ALLOW)", handler, s)
			}
			st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", in.Info.Pid))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(st), "\nSeccomp:\t2\n") {
				t.Errorf("%s: container process %d not in seccomp filter mode", handler, in.Info.Pid)
			}
			t.Logf("%s: %q in %s", handler, strings.TrimSpace(result), time.Since(start).Round(time.Millisecond))
		})
	}
}

// recordedWorkload repeats file, process and directory work until
// /trigger/stop appears, counting its rounds in /trigger/rounds; with
// /trigger/extra present it then makes a symbolic link, which no round
// does. A new container of it with /trigger/stop in place makes one round.
// (cmd/nodeshim's runningWorkload, the host's round trip.)
const recordedWorkload = `i=0
while :; do
  ls /etc > /dev/null
  cat /etc/passwd | wc -l > /dev/null
  mkdir -p /tmp/made
  sh -c 'echo child $((6 * 7))' > /dev/null
  i=$((i + 1))
  echo $i > /trigger/rounds.tmp && mv /trigger/rounds.tmp /trigger/rounds
  [ -e /trigger/stop ] && break
  sleep 0.05
done
if [ -e /trigger/extra ]; then ln -s /etc /tmp/link || exit 3; fi
echo done`

// workloadRounds returns the rounds recordedWorkload has counted in dir.
func workloadRounds(dir string) (int, error) {
	s, err := readFile(filepath.Join(dir, "rounds"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(s)
}

// startRecord starts `nodeshim seccomp record` with args and returns once
// it logs that it records (after it measured or found the runtime's
// needs); wait returns its log when it has ended by itself.
func startRecord(t *testing.T, args ...string) (wait func() (string, error)) {
	t.Helper()
	rec := exec.Command(nodeshimBin, append([]string{"seccomp", "record"}, args...)...)
	pipe, err := rec.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	rec.Stdout = &stdout
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if rec.ProcessState == nil {
			rec.Process.Kill()
			rec.Wait()
		}
	})
	var log strings.Builder
	sc := bufio.NewScanner(pipe)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "INFO recording") {
			break
		}
	}
	if !strings.Contains(log.String(), "INFO recording") {
		rec.Wait()
		t.Fatalf("nodeshim seccomp record did not start recording:\n%s", log.String())
	}
	return func() (string, error) {
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
		}
		err := rec.Wait()
		return log.String() + stdout.String(), err
	}
}

// installProfile installs profile as the Localhost profile name the way
// an operator does on a node whose nodeshim serve reads a configuration
// directory: a *.conf drop-in naming it under seccompProfiles, written
// beside the source and renamed into it. It waits until GET /status
// lists it installed under the kubelet's seccomp root and returns its
// path there; the drop-in is removed when t ends.
func installProfile(t *testing.T, name, profile string) string {
	t.Helper()
	doc, err := json.Marshal(map[string]any{
		"apiVersion":      "nodeshim.io/v1alpha1",
		"kind":            "ShimConfiguration",
		"seccompProfiles": map[string]string{name: profile},
	})
	if err != nil {
		t.Fatal(err)
	}
	dropin := filepath.Join(nodevm.NodeshimConfig, "50-"+strings.NewReplacer("/", "-", ".json", "").Replace(name)+".conf")
	staged := filepath.Join(filepath.Dir(nodevm.NodeshimConfig), "."+filepath.Base(dropin))
	if err := os.WriteFile(staged, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(staged, dropin); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dropin); err != nil {
			t.Error(err)
		}
	})
	path := filepath.Join(seccompRoot, name)
	testutil.Eventually(t, "GET /status lists "+name+" installed", func() error {
		var doc status.Document
		if err := getJSON(t, "/status", &doc); err != nil {
			return err
		}
		if doc.SeccompProfiles == nil {
			return fmt.Errorf("no seccompProfiles in the status yet")
		}
		for _, p := range doc.SeccompProfiles.Installed {
			if p.Name == name {
				if p.Path != path {
					return fmt.Errorf("%s installed at %s, want %s", p.Name, p.Path, path)
				}
				b, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				if len(b) == 0 {
					return fmt.Errorf("%s is empty", path)
				}
				return nil
			}
		}
		var conds []string
		for _, c := range doc.Conditions {
			if c.Type == "ConfigHealthy" || c.Type == "SeccompProfilesReady" {
				conds = append(conds, fmt.Sprintf("%s=%s(%s): %s", c.Type, c.Status, c.Reason, c.Message))
			}
		}
		return fmt.Errorf("installed: %+v; %s", doc.SeccompProfiles.Installed, strings.Join(conds, "; "))
	})
	return path
}

// exited waits until c has exited and returns its exit code and logs.
func (c *container) exited(t *testing.T) (int, string) {
	t.Helper()
	var code int
	testutil.Eventually(t, "container "+c.Name+" exited", func() error {
		out, err := runErr(crictlBin, "inspect", "-o", "json", c.ID)
		if err != nil {
			return err
		}
		var in struct {
			Status struct {
				State    string `json:"state"`
				ExitCode int    `json:"exitCode"`
				Reason   string `json:"reason"`
				Message  string `json:"message"`
			} `json:"status"`
		}
		if err := json.Unmarshal([]byte(out), &in); err != nil {
			return fmt.Errorf("crictl inspect %s: %w", c.ID, err)
		}
		if in.Status.State != "CONTAINER_EXITED" {
			return fmt.Errorf("state %s", in.Status.State)
		}
		code = in.Status.ExitCode
		return nil
	})
	out, err := exec.Command(crictlBin, "logs", c.ID).CombinedOutput()
	if err != nil {
		t.Fatalf("crictl logs %s: %v: %s", c.ID, err, out)
	}
	return code, string(out)
}

// TestSeccompRecordRunningEnforceNew is an operator's round trip on the
// node with each runtime handler (runc 1.5 and crun 1.21): a CRI
// container that already runs, unconfined, is recorded by its namespace,
// pod and container names (`nodeshim seccomp record`, which adds what the
// handler's runtime binary needs, measured on this node); the profile is
// installed as a Localhost profile through serve's configuration (a
// drop-in); a new container of the same image and command, its security
// context naming the profile, starts under it and exits 0 with the same
// output; made to create a symbolic link, which the recording never saw,
// it gets EPERM.
func TestSeccompRecordRunningEnforceNew(t *testing.T) {
	requireNode(t)
	for _, handler := range []string{"runc", "crun"} {
		t.Run(handler, func(t *testing.T) {
			start := time.Now()
			p := runPodOn(t, "record-"+handler, handler)
			trigger := t.TempDir()
			p.runContainer(t, containerOptions{Name: "worker", Command: []string{"sh", "-c", recordedWorkload},
				Mounts: map[string]string{"/trigger": trigger}})
			testutil.Eventually(t, "the worker's first round", func() error {
				_, err := workloadRounds(trigger)
				return err
			})
			recorded := filepath.Join(t.TempDir(), "worker.json")
			recStart := time.Now()
			wait := startRecord(t, "--out-file", recorded, "--namespace", p.Namespace, "--pod", p.Name,
				"--container", "worker", "--runtime-endpoint", "unix://"+nodevm.ContainerdSocket)
			attached := time.Since(recStart)
			at, err := workloadRounds(trigger)
			if err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, "two rounds under the recorder", func() error {
				if n, err := workloadRounds(trigger); err != nil || n < at+2 {
					return fmt.Errorf("round %d (%v), attached at %d", n, err, at)
				}
				return nil
			})
			if err := os.WriteFile(filepath.Join(trigger, "stop"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			log, err := wait()
			if err != nil {
				t.Fatalf("nodeshim seccomp record: %v\n%s", err, log)
			}
			if !strings.Contains(log, "runtime needs") || !strings.Contains(log, handler+" version") {
				t.Errorf("the recording has no needs of %s's runtime:\n%s", handler, log)
			}
			for _, l := range strings.Split(log, "\n") {
				if strings.Contains(l, "INFO runtime needs") {
					t.Logf("%s: %s", handler, l)
				}
			}
			profile, err := os.ReadFile(recorded)
			if err != nil {
				t.Fatal(err)
			}
			var parsed struct {
				DefaultAction string `json:"defaultAction"`
				Syscalls      []struct {
					Names []string `json:"names"`
				} `json:"syscalls"`
			}
			if err := json.Unmarshal(profile, &parsed); err != nil {
				t.Fatalf("recorded profile: %v", err)
			}
			var names []string
			for _, s := range parsed.Syscalls {
				names = append(names, s.Names...)
			}
			for _, link := range []string{"symlink", "symlinkat"} {
				if slices.Contains(names, link) {
					t.Errorf("the profile allows %s, which the recorded rounds never made", link)
				}
			}
			if !slices.Contains(names, "execve") || parsed.DefaultAction == "SCMP_ACT_ALLOW" {
				t.Errorf("recorded profile: default %s, %d syscalls allowed: %v", parsed.DefaultAction, len(names), names)
			}
			name := "nodeshim/recorded-" + handler + ".json"
			path := installProfile(t, name, string(profile))

			for _, tc := range []struct {
				name  string
				files []string
				code  int
				log   string
			}{
				{"same", []string{"stop"}, 0, "done"},
				{"symlink", []string{"stop", "extra"}, 3, "ln: /tmp/link: Operation not permitted"},
			} {
				again := t.TempDir()
				for _, f := range tc.files {
					if err := os.WriteFile(filepath.Join(again, f), nil, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				c := p.create(t, containerOptions{Name: "again-" + tc.name, Command: []string{"sh", "-c", recordedWorkload},
					Mounts: map[string]string{"/trigger": again}, SeccompLocalhost: path})
				if out, err := runErr(crictlBin, "start", c.ID); err != nil {
					t.Errorf("%s: %s container under the recorded profile does not start: %v %s", handler, tc.name, err, out)
					continue
				}
				code, logs := c.exited(t)
				if code != tc.code || !strings.Contains(logs, tc.log) {
					t.Errorf("%s: %s under the recorded profile: exit %d, want %d; logs:\n%s", handler, tc.name, code, tc.code, logs)
				}
			}
			t.Logf("%s: recorded %d syscalls (the runtime's needs ready %s after the recorder's start), enforced on two new containers; %s in all",
				handler, len(names), attached.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		})
	}
}
