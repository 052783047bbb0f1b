package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/kernel/seccomp"
	"github.com/nodeshim/nodeshim/shim/profiles"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// containerWorkload is what the recorded containers run: file, process
// and directory work whose output is the same on every run.
const containerWorkload = `set -e
echo start
ls /etc | head -n 3
cat /etc/passwd | wc -l
mkdir /tmp/made
echo made
sh -c 'echo child $((6 * 7))'
echo end`

// startRecorder runs `nodeshim seccomp record ARGS...` in the background
// and returns once it logs that it is recording, with a function that
// waits for it to end and returns its stderr. Without --cache-dir in args,
// the runtime's needs are kept in a directory of t.
func startRecorder(t *testing.T, args ...string) (wait func() (string, error)) {
	t.Helper()
	// The runtime's needs are kept under the test's directory, not the
	// host's default.
	if !slices.Contains(args, "--cache-dir") {
		args = append(args, "--cache-dir", t.TempDir())
	}
	js, err := json.Marshal(append([]string{"seccomp", "record"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	rec := exec.Command(os.Args[0], "-test.run=^TestSeccompHelperProcess$")
	rec.Env = append(os.Environ(), "NODESHIM_TEST_MAIN_ARGS="+string(js))
	pipe, err := rec.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if rec.ProcessState == nil {
			rec.Process.Kill()
			rec.Wait()
		}
	})
	var log bytes.Buffer
	sc := bufio.NewScanner(pipe)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "INFO recording") {
			break
		}
	}
	if !strings.Contains(log.String(), "INFO recording") {
		rec.Wait()
		t.Fatalf("the recorder did not start:\n%s", log.String())
	}
	return func() (string, error) {
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
		}
		err := rec.Wait()
		return log.String(), err
	}
}

// withoutSyscall returns profile with name taken out of its allow rule.
func withoutSyscall(t *testing.T, profile []byte, name string) []byte {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal(profile, &p); err != nil {
		t.Fatal(err)
	}
	rule := p["syscalls"].([]any)[0].(map[string]any)
	names := rule["names"].([]any)
	rule["names"] = slices.DeleteFunc(names, func(n any) bool { return n == name })
	if len(rule["names"].([]any)) != len(names)-1 {
		t.Fatalf("the profile does not allow %s", name)
	}
	out, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSeccompRecordContainerRoundTrip records a podman container under
// runc and under crun with --container-id, from its creation (podman
// container init: the runtime's init waits for the start) until it exits,
// installs the profile as Localhost with shim/profiles' Installer (what
// serve does), and runs a new container of the same image with it: the
// output is the same. Without mkdir, which the workload needs, the new
// container fails on exactly that step.
func TestSeccompRecordContainerRoundTrip(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/sys/kernel/btf/vmlinux")
	for _, runtime := range []string{runtimetest.RuntimeRunc, runtimetest.RuntimeCrun} {
		t.Run(runtime, func(t *testing.T) {
			p := rt.Podman(t)
			bin := p.RuntimePath(runtime)
			// no-new-privileges: the runtime installs the filter after the
			// start, just before the execve, so that the recording (which
			// begins in the created state) sees what runs under it.
			nnp := []string{"--security-opt", "no-new-privileges"}
			// The recorded container runs unconfined: a syscall that
			// podman's default profile denies would never be seen.
			args := append([]string{"--runtime", bin, "create", "--network", "none", "--cgroup-parent", p.CgroupParent,
				"--security-opt", "seccomp=unconfined"}, nnp...)
			out, err := p.Command(append(args, runtimetest.BusyboxImage, "sh", "-c", containerWorkload)...).Output()
			if err != nil {
				t.Fatalf("podman create: %v", err)
			}
			id := strings.TrimSpace(string(out))
			t.Cleanup(func() { p.Command("rm", "--force", "--time", "0", id).Run() })
			if out, err := p.Command("container", "init", id).CombinedOutput(); err != nil {
				t.Fatalf("podman container init: %v: %s", err, out)
			}

			dir := t.TempDir()
			recorded := filepath.Join(dir, "recorded.json")
			wait := startRecorder(t, "--out-file", recorded, "--container-id", id, "--runtime", bin)
			var stdout, stderr bytes.Buffer
			start := p.Command("start", "--attach", id)
			start.Stdout, start.Stderr = &stdout, &stderr
			if err := start.Run(); err != nil {
				t.Fatalf("podman start: %v: %s", err, stderr.String())
			}
			if !strings.HasPrefix(stdout.String(), "start\n") || !strings.HasSuffix(stdout.String(), "made\nchild 42\nend\n") {
				t.Fatalf("the recorded container's output:\n%s", stdout.String())
			}
			// The recorder ends by itself when the container's init exits.
			log, err := wait()
			if err != nil {
				t.Fatalf("record: %v\n%s", err, log)
			}
			if !strings.Contains(log, "init process exited") {
				t.Errorf("the recorder did not see the container end:\n%s", log)
			}
			profile, err := os.ReadFile(recorded)
			if err != nil {
				t.Fatal(err)
			}
			mkdir := "mkdir"
			if !strings.Contains(string(profile), `"mkdir"`) {
				mkdir = "mkdirat"
			}

			in := &profiles.Installer{
				Root:     filepath.Join(dir, "kubelet", "seccomp"),
				StateDir: filepath.Join(dir, "state"),
				Parse:    seccomp.NodeParseOptions(nil),
			}
			installed, err := in.Apply(map[string]string{
				"recorded/workload.json":          string(profile),
				"recorded/workload-no-mkdir.json": string(withoutSyscall(t, profile, mkdir)),
			})
			if err != nil {
				t.Fatal(err)
			}
			paths := map[string]string{}
			for _, i := range installed {
				paths[i.Name] = i.Path
			}

			run := func(profile string) runtimetest.Result {
				return p.Run(t, runtimetest.RunOptions{Runtime: runtime, Seccomp: paths[profile], Flags: nnp,
					Command: []string{"sh", "-c", containerWorkload}})
			}
			res := run("recorded/workload.json")
			if res.ExitCode != 0 || res.Stdout != stdout.String() || res.Stderr != "" {
				t.Errorf("under the recorded profile: exit %d, stderr %q, output:\n%s\nwant:\n%s", res.ExitCode, res.Stderr, res.Stdout, stdout.String())
			}
			res = run("recorded/workload-no-mkdir.json")
			want, _, _ := strings.Cut(stdout.String(), "made\n")
			if res.ExitCode == 0 || res.Stdout != want || !strings.Contains(res.Stderr, "mkdir: can't create directory '/tmp/made': Operation not permitted") {
				t.Errorf("without %s: exit %d, stderr %q, output:\n%s\nwant:\n%s", mkdir, res.ExitCode, res.Stderr, res.Stdout, want)
			}
		})
	}
}

// TestSeccompRecordCRIContainerByName records a running container of a
// CRI pod by its namespace, pod and container names through containerd's
// CRI socket. The container waits for a file from the host before its
// workload, so that the workload runs under the recorder; the recording
// ends by itself when the container exits, and the profile holds what the
// workload did.
func TestSeccompRecordCRIContainerByName(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/sys/kernel/btf/vmlinux")
	c := rt.Containerd(t)
	pod := c.RunPod(t, runtimetest.PodOptions{Namespace: "shop"})
	trigger := t.TempDir()
	ctr := pod.Run(t, runtimetest.ContainerOptions{
		Name:    "worker",
		Command: []string{"sh", "-c", "while [ ! -e /trigger/go ]; do sleep 0.05; done\n" + containerWorkload},
		Mounts:  []*runtimeapi.Mount{{ContainerPath: "/trigger", HostPath: trigger, Readonly: true}},
	})

	profile := filepath.Join(t.TempDir(), "worker.json")
	wait := startRecorder(t, "--out-file", profile, "--namespace", "shop", "--pod", pod.Config.Metadata.Name,
		"--container", "worker", "--runtime-endpoint", c.Address)
	if err := os.WriteFile(filepath.Join(trigger, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := ctr.Wait(t); code != 0 {
		t.Errorf("the container exited %d", code)
	}
	log, err := wait()
	if err != nil {
		t.Fatalf("record: %v\n%s", err, log)
	}
	if !strings.Contains(log, "shop/"+pod.Config.Metadata.Name+"/worker") || !strings.Contains(log, "init process exited") {
		t.Errorf("the recorder did not name the container or see it end:\n%s", log)
	}
	if out := ctr.Logs(t); !strings.HasSuffix(out, "made\nchild 42\nend\n") {
		t.Errorf("the container's output:\n%s", out)
	}
	_, names := profileNames(t, profile)
	for _, want := range [][]string{{"mkdir", "mkdirat"}, {"execve"}, {"wait4"}, {"clone", "clone3", "fork", "vfork"}, {"getdents64"}, {"exit_group"}} {
		if !slices.ContainsFunc(want, func(n string) bool { return slices.Contains(names, n) }) {
			t.Errorf("the profile has none of %v: %v", want, names)
		}
	}

	// A name that matches no running container is an error naming it.
	_, stderr, code := runMain(t, "seccomp", "record", "--out-file", filepath.Join(t.TempDir(), "p.json"), "--namespace", "shop",
		"--pod", pod.Config.Metadata.Name, "--container", "nosuch", "--runtime-endpoint", c.Address)
	if code != 1 || !strings.Contains(stderr, "shop/"+pod.Config.Metadata.Name+"/nosuch: container not found") {
		t.Errorf("unknown container: exit %d, stderr %s", code, stderr)
	}
}
