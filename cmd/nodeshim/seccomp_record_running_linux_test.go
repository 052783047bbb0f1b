package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/kernel/seccomp"
	"github.com/nodeshim/nodeshim/shim/profiles"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// runningWorkload repeats file, process and directory work until
// /trigger/stop appears, counting its rounds in /trigger/rounds; with
// /trigger/extra present it then makes a symbolic link, which no round
// does. A new container of it with /trigger/stop in place makes one round.
const runningWorkload = `i=0
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

// rounds returns the rounds the workload has counted in dir.
func rounds(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "rounds"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// recordWhileRunning records, with the recorder started by start, a
// container that already runs runningWorkload with its trigger directory
// at trigger: it waits until the recorder is attached and the container
// has made two more rounds, stops the container through the trigger and
// returns the recorder's log once it has ended by itself.
func recordWhileRunning(t *testing.T, trigger string, start func() (wait func() (string, error))) string {
	t.Helper()
	testutil.Eventually(t, "the container's first round", func() error {
		_, err := rounds(trigger)
		return err
	})
	wait := start()
	attached, err := rounds(trigger)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "two rounds under the recorder", func() error {
		if n, err := rounds(trigger); err != nil || n < attached+2 {
			return fmt.Errorf("round %d (%v), attached at %d", n, err, attached)
		}
		return nil
	})
	if err := os.WriteFile(filepath.Join(trigger, "stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	log, err := wait()
	if err != nil {
		t.Fatalf("record: %v\n%s", err, log)
	}
	if !strings.Contains(log, "init process exited") || !strings.Contains(log, "runtime needs") {
		t.Errorf("the recorder did not see the container end or give the runtime's needs:\n%s", log)
	}
	return log
}

// checkRecordedRunning checks the profile recorded from a running
// runningWorkload: it allows the runtime's needs (fstatfs for runc: the
// syscall whose absence made runc fail with "ensure /proc/self/fd is on
// procfs"), the table marks those only the runtime made, and no symbolic
// link syscall is in it.
func checkRecordedRunning(t *testing.T, profile, log, runtime string) {
	t.Helper()
	_, names := profileNames(t, profile)
	want := []string{"execve", "wait4", "mkdir", "exit_group"}
	if runtime == runtimetest.RuntimeRunc {
		want = append(want, "fstatfs")
	}
	for _, w := range want {
		if w == "mkdir" && slices.Contains(names, "mkdirat") {
			continue
		}
		if !slices.Contains(names, w) {
			t.Errorf("the profile lacks %s: %v", w, names)
		}
	}
	for _, link := range []string{"symlink", "symlinkat"} {
		if slices.Contains(names, link) {
			t.Errorf("the profile allows %s, which the recorded rounds never made", link)
		}
	}
	if table := recordTable(t, log); !strings.Contains(table, "SOURCE") || !strings.Contains(table, "runtime\n") {
		t.Errorf("the table marks no syscall as the runtime's:\n%s", table)
	}
}

// runtimeOnly returns the syscalls that the record table marks as the
// runtime's alone.
func runtimeOnly(t *testing.T, log string) []string {
	t.Helper()
	var names []string
	for _, l := range strings.Split(recordTable(t, log), "\n") {
		if f := strings.Fields(l); len(f) == 4 && f[3] == "runtime" {
			names = append(names, f[0])
		}
	}
	if len(names) == 0 {
		t.Fatalf("the table marks no syscall as the runtime's alone:\n%s", log)
	}
	return names
}

// TestSeccompRecordRunningPodmanContainer records a podman container
// that already runs, under runc and under crun, without no_new_privileges
// (podman's default, under which the runtime loads the filter before it
// drops capabilities), with --container-id; then a new container of the
// same image and command runs under the recorded profile and exits 0 with
// the same output; without the syscalls that only the runtime made, runc
// fails as it did before nodeshim added them ("ensure /proc/self/fd is on
// procfs"). The profile is enforced: the same command made to
// create a symbolic link, which the recording never saw, gets EPERM
// there. The runtime's needs are measured once per runtime and kept
// under --cache-dir.
func TestSeccompRecordRunningPodmanContainer(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/sys/kernel/btf/vmlinux")
	cache := t.TempDir()
	for i, runtime := range []string{runtimetest.RuntimeRunc, runtimetest.RuntimeCrun} {
		t.Run(runtime, func(t *testing.T) {
			p := rt.Podman(t)
			bin := p.RuntimePath(runtime)
			trigger := t.TempDir()
			res := p.Run(t, runtimetest.RunOptions{Runtime: runtime, Detach: true,
				Flags:   []string{"--security-opt", "seccomp=unconfined", "-v", trigger + ":/trigger"},
				Command: []string{"sh", "-c", runningWorkload}})
			if res.ExitCode != 0 {
				t.Fatalf("podman run: exit %d: %s", res.ExitCode, res.Stderr)
			}
			id := strings.TrimSpace(res.Stdout)

			dir := t.TempDir()
			recorded := filepath.Join(dir, "recorded.json")
			log := recordWhileRunning(t, trigger, func() func() (string, error) {
				return startRecorder(t, "--out-file", recorded, "--container-id", id, "--runtime", bin, "--cache-dir", cache)
			})
			if !strings.Contains(log, "kept=false") {
				t.Errorf("the runtime's needs were not measured afresh:\n%s", log)
			}
			if kept, err := filepath.Glob(filepath.Join(cache, "runtime-needs-*.json")); err != nil || len(kept) != i+1 {
				t.Errorf("kept measurements: %v %v, want %d", kept, err, i+1)
			}
			checkRecordedRunning(t, recorded, log, runtime)
			profile, err := os.ReadFile(recorded)
			if err != nil {
				t.Fatal(err)
			}
			in := &profiles.Installer{
				Root:     filepath.Join(dir, "kubelet", "seccomp"),
				StateDir: filepath.Join(dir, "state"),
				Parse:    seccomp.NodeParseOptions(nil),
			}
			// The profile as it was before the runtime's needs: without
			// the syscalls that only the runtime made.
			withoutNeeds := profile
			for _, name := range runtimeOnly(t, log) {
				withoutNeeds = withoutSyscall(t, withoutNeeds, name)
			}
			installed, err := in.Apply(map[string]string{
				"recorded/running.json":               string(profile),
				"recorded/running-without-needs.json": string(withoutNeeds),
			})
			if err != nil || len(installed) != 2 {
				t.Fatalf("install: %v %v", installed, err)
			}
			paths := map[string]string{}
			for _, i := range installed {
				paths[i.Name] = i.Path
			}

			// A new container, its trigger set to make one round.
			again := t.TempDir()
			if err := os.WriteFile(filepath.Join(again, "stop"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			run := func(profile string) runtimetest.Result {
				return p.Run(t, runtimetest.RunOptions{Runtime: runtime, Seccomp: paths[profile],
					Flags: []string{"-v", again + ":/trigger"}, Command: []string{"sh", "-c", runningWorkload}})
			}
			if res := run("recorded/running.json"); res.ExitCode != 0 || res.Stdout != "done\n" || res.Stderr != "" {
				t.Errorf("under the recorded profile: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
			}
			// runc's init, without the fstatfs of its check that
			// /proc/self/fd is procfs, does not start the container.
			if runtime == runtimetest.RuntimeRunc {
				res := run("recorded/running-without-needs.json")
				if res.ExitCode == 0 || !strings.Contains(res.Stderr, "ensure /proc/self/fd is on procfs: operation not permitted") {
					t.Errorf("without the runtime's needs: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
				}
			}
			if err := os.WriteFile(filepath.Join(again, "extra"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if res := run("recorded/running.json"); res.ExitCode != 3 || !strings.Contains(res.Stderr, "ln: /tmp/link: Operation not permitted") {
				t.Errorf("a symbolic link under the recorded profile: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
			}
		})
	}
}

// TestSeccompRecordRunningCRIContainer records a running container of a
// CRI pod by its names, under containerd's runc and crun handlers (the
// recorder takes the runtime binary from the container's runtime
// options), installs the profile as Localhost and runs a new container
// of the same image and command under it: it exits 0; made to create a
// symbolic link, it gets EPERM.
func TestSeccompRecordRunningCRIContainer(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/sys/kernel/btf/vmlinux")
	c := rt.Containerd(t)
	cache := t.TempDir()
	for _, handler := range []string{runtimetest.RuntimeRunc, runtimetest.RuntimeCrun} {
		t.Run(handler, func(t *testing.T) {
			pod := c.RunPod(t, runtimetest.PodOptions{Namespace: "shop", RuntimeHandler: handler})
			trigger := t.TempDir()
			pod.Run(t, runtimetest.ContainerOptions{
				Name:    "worker",
				Command: []string{"sh", "-c", runningWorkload},
				Mounts:  []*runtimeapi.Mount{{ContainerPath: "/trigger", HostPath: trigger}},
			})
			dir := t.TempDir()
			recorded := filepath.Join(dir, "worker.json")
			log := recordWhileRunning(t, trigger, func() func() (string, error) {
				return startRecorder(t, "--out-file", recorded, "--namespace", "shop", "--pod", pod.Config.Metadata.Name,
					"--container", "worker", "--runtime-endpoint", c.Address, "--cache-dir", cache)
			})
			checkRecordedRunning(t, recorded, log, handler)
			// The runtime measured is the handler's binary_name.
			if !strings.Contains(log, handler+" version") {
				t.Errorf("the runtime's needs are not %s's:\n%s", handler, log)
			}
			profile, err := os.ReadFile(recorded)
			if err != nil {
				t.Fatal(err)
			}
			in := &profiles.Installer{
				Root:     filepath.Join(dir, "kubelet", "seccomp"),
				StateDir: filepath.Join(dir, "state"),
				Parse:    seccomp.NodeParseOptions(nil),
			}
			installed, err := in.Apply(map[string]string{"recorded/worker.json": string(profile)})
			if err != nil || len(installed) != 1 {
				t.Fatalf("install: %v %v", installed, err)
			}
			for _, tc := range []struct {
				name  string
				files []string
				code  int32
				log   string
			}{
				{"same", []string{"stop"}, 0, "done\n"},
				{"symlink", []string{"stop", "extra"}, 3, "ln: /tmp/link: Operation not permitted"},
			} {
				again := t.TempDir()
				for _, f := range tc.files {
					if err := os.WriteFile(filepath.Join(again, f), nil, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				ctr := pod.Run(t, runtimetest.ContainerOptions{
					Name:             "again-" + tc.name,
					Command:          []string{"sh", "-c", runningWorkload},
					Mounts:           []*runtimeapi.Mount{{ContainerPath: "/trigger", HostPath: again}},
					SeccompLocalhost: installed[0].Path,
				})
				if code := ctr.Wait(t); code != tc.code || !strings.Contains(ctr.Logs(t), tc.log) {
					t.Errorf("%s under the recorded profile: exit %d, want %d; logs:\n%s", tc.name, code, tc.code, ctr.Logs(t))
				}
			}
		})
	}
}
