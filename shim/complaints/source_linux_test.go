package complaints

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/kernel/seccomp"
	"github.com/nodeshim/nodeshim/shim/profiles"
	"github.com/nodeshim/nodeshim/shim/source/sourcetest"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

func TestMain(m *testing.M) { os.Exit(rtEnv.Main(m)) }

// rtEnv runs the real container runtimes of the package's tests.
var rtEnv runtimetest.Env

var discard = slog.New(slog.DiscardHandler)

// denyProfile is a profile the workload below breaks: the shell changes
// its directory (chdir), for which the profile kills the process, and
// sets its umask, which the profile denies with EPERM; mkdir, also
// killed for, runs in a child that exits at once.
const denyProfile = `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[
	{"names":["chdir","mkdir","mkdirat"],"action":"SCMP_ACT_KILL_PROCESS"},
	{"names":["umask"],"action":"SCMP_ACT_ERRNO"}]}`

// TestComplainModeContainer installs a profile in complain mode as serve
// does, runs a CRI container under it, under runc and crun, whose
// workload makes syscalls the profile kills for and one it denies with
// EPERM: the workload runs to its end (nothing killed, no EPERM), and the
// would-be denials of the shell's chdir and umask are counted for that
// container by its Kubernetes names, in the status document and in
// SeccompComplainClean's message.
func TestComplainModeContainer(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/dev/kmsg")
	c := rtEnv.Containerd(t)
	dir := t.TempDir()
	in := &profiles.Installer{Root: filepath.Join(dir, "seccomp"), StateDir: filepath.Join(dir, "state"),
		Parse: seccomp.NodeParseOptions(nil), Complain: []string{"shop/deny.json"}, Logger: discard}
	installed, err := in.Apply(map[string]string{"shop/deny.json": denyProfile})
	if err != nil {
		t.Fatal(err)
	}
	m := status.New(nil)
	sourcetest.Run(t, m, &Source{Profiles: in.Complain, Logger: discard, RuntimeEndpoint: c.Address})
	d := sourcetest.WaitFor(t, m, func(d status.Document) bool { _, ok := d.Condition(status.TypeSeccompComplaints); return ok })
	if cnd, _ := d.Condition(status.TypeSeccompComplaints); cnd.Status == condition.Unknown {
		t.Fatalf("complaints not watched: %+v", cnd)
	}
	for _, h := range []string{runtimetest.RuntimeRunc, runtimetest.RuntimeCrun} {
		t.Run(h, func(t *testing.T) {
			pod := c.RunPod(t, runtimetest.PodOptions{Namespace: "shop", Name: "web-" + h, RuntimeHandler: h})
			trigger := t.TempDir()
			// The shell stays up, so that its cgroups can be read when
			// the record arrives (the kernel writes it asynchronously).
			ctr := pod.Run(t, runtimetest.ContainerOptions{
				Name:             "worker",
				Command:          []string{"sh", "-c", "cd /tmp && umask 077 && mkdir /tmp/made && [ $(umask) = 0077 ] && echo made; until [ -e /trigger/stop ]; do sleep 0.1; done; echo done"},
				Mounts:           []*runtimeapi.Mount{{ContainerPath: "/trigger", HostPath: trigger}},
				SeccompLocalhost: installed[0].Path,
			})
			var d status.Document
			testutil.Eventually(t, "chdir and umask counted for the container", func() error {
				d = m.Snapshot()
				if complained(d, ctr.ID, "chdir") == nil || complained(d, ctr.ID, "umask") == nil {
					return fmt.Errorf("complaints %+v", d.SeccompComplaints)
				}
				return nil
			})
			row := complained(d, ctr.ID, "")
			if row.Namespace != "shop" || row.Pod != "web-"+h || row.Container != "worker" || row.PodUID != pod.Config.Metadata.Uid {
				t.Errorf("would-be denials recorded for %+v", row)
			}
			cnd, _ := d.Condition(status.TypeSeccompComplaints)
			if cnd.Status != condition.False || cnd.Reason != ReasonWouldDeny || !strings.Contains(cnd.Message, "shop/web-"+h+"/worker: ") {
				t.Errorf("condition %+v", cnd)
			}
			if err := os.WriteFile(filepath.Join(trigger, "stop"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if code := ctr.Wait(t); code != 0 || !strings.Contains(ctr.Logs(t), "made\ndone\n") {
				t.Errorf("workload under the complain-mode profile: exit %d, logs:\n%s", code, ctr.Logs(t))
			}
		})
	}
}

// complained returns the row of container id when it lists syscall (any
// row of it when syscall is ""), nil otherwise.
func complained(d status.Document, id, syscall string) *status.ContainerComplaints {
	if d.SeccompComplaints == nil {
		return nil
	}
	for i, r := range d.SeccompComplaints.Containers {
		if r.ContainerID != id {
			continue
		}
		for _, s := range r.Syscalls {
			if syscall == "" || s.Name == syscall || s.Name == syscall+"at" {
				return &d.SeccompComplaints.Containers[i]
			}
		}
	}
	return nil
}
