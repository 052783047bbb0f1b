package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// replicaWorkload loops like a server and, in each replica, also makes
// the syscall named by its trigger directory's "extra" file: mkdir in one,
// a symbolic link in another.
const replicaWorkload = `i=0
while :; do
  ls /etc > /dev/null
  case "$(cat /trigger/extra)" in
    mkdir) mkdir -p /tmp/made ;;
    link) ln -sf /etc /tmp/link ;;
  esac
  i=$((i + 1))
  echo $i > /trigger/rounds.tmp && mv /trigger/rounds.tmp /trigger/rounds
  [ -e /trigger/stop ] && break
  sleep 0.05
done
echo done`

// TestSeccompRecordReplicas records the two running replicas of a
// ReplicaSet's pod (kubelet's labels, pod-template-hash) through CRI, and
// not a third pod of the namespace with another owner: the profile is the
// union (mkdir from one replica, symlink from the other), and the replicas
// report says two replicas made the syscalls both made, one each made
// mkdir and symlink, and lists the two pods.
func TestSeccompRecordReplicas(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/sys/kernel/btf/vmlinux")
	c := rt.Containerd(t)
	run := func(pod string, labels map[string]string, extra string) string {
		p := c.RunPod(t, runtimetest.PodOptions{Namespace: "shop", Name: pod, Labels: labels})
		trigger := t.TempDir()
		if err := os.WriteFile(filepath.Join(trigger, "extra"), []byte(extra), 0o644); err != nil {
			t.Fatal(err)
		}
		p.Run(t, runtimetest.ContainerOptions{Name: "worker", Command: []string{"sh", "-c", replicaWorkload},
			Mounts: []*runtimeapi.Mount{{ContainerPath: "/trigger", HostPath: trigger}}})
		testutil.Eventually(t, "the first round of "+pod, func() error {
			_, err := rounds(trigger)
			return err
		})
		return trigger
	}
	rs := map[string]string{"app": "web", "pod-template-hash": "7d4f8b"}
	a := run("web-7d4f8b-aaaaa", rs, "mkdir")
	b := run("web-7d4f8b-bbbbb", rs, "link")
	other := run("web-5c6d7e-ccccc", map[string]string{"app": "web", "pod-template-hash": "5c6d7e"}, "mkdir")

	out := filepath.Join(t.TempDir(), "web.json")
	wait := startRecorder(t, "--out-file", out, "--namespace", "shop", "--pod", "web-7d4f8b-aaaaa", "--container", "worker",
		"--replicas", "--duration", "3s", "--runtime-endpoint", c.Address)
	log, err := wait()
	if err != nil {
		t.Fatalf("record: %v\n%s", err, log)
	}
	for _, trig := range []string{a, b, other} {
		if err := os.WriteFile(filepath.Join(trig, "stop"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, names := profileNames(t, out)
	for _, w := range []string{"mkdir", "symlink", "execve", "wait4"} {
		if !slices.Contains(names, w) && !slices.Contains(names, w+"at") {
			t.Errorf("the union lacks %s: %v", w, names)
		}
	}
	data, err := os.ReadFile(out + replicasSuffix)
	if err != nil {
		t.Fatal(err)
	}
	var rep replicaReport
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Owner != "ReplicaSet/web-7d4f8b" || len(rep.Replicas) != 2 || rep.Replicas[0].Pod != "web-7d4f8b-aaaaa" ||
		rep.Replicas[1].Pod != "web-7d4f8b-bbbbb" || rep.Replicas[0].ContainerID == "" {
		t.Fatalf("replicas report: %s", data)
	}
	made := map[string]int{}
	for _, s := range rep.Syscalls {
		made[s.Name] = s.Replicas
	}
	count := func(n string) int { return made[n] + made[n+"at"] }
	for n, want := range map[string]int{"mkdir": 1, "symlink": 1, "execve": 2, "wait4": 2} {
		if got := count(n); got != want {
			t.Errorf("%s made by %d replicas, want %d\n%s", n, got, want, data)
		}
	}
	if len(rep.Syscalls) != len(names) {
		t.Errorf("the report lists %d syscalls, the profile allows %d", len(rep.Syscalls), len(names))
	}
}
