package cri

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/testenv/fakecri"
)

func TestCgroupRelPath(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"cgroupfs", "/kubepods/burstable/pod1/abc", "/kubepods/burstable/pod1/abc"},
		{"cgroupfs relative", "kubepods/pod1/abc", "/kubepods/pod1/abc"},
		{"systemd burstable", "kubepods-burstable-pod1_2.slice:cri-containerd:abc",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice/cri-containerd-abc.scope"},
		{"systemd guaranteed", "kubepods-pod9.slice:crio:abc", "/kubepods.slice/kubepods-pod9.slice/crio-abc.scope"},
		{"systemd root slice", "-.slice:docker:abc", "/docker-abc.scope"},
		{"systemd no prefix", "system.slice::abc", "/system.slice/abc.scope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CgroupRelPath(tc.in); got != tc.want {
				t.Errorf("CgroupRelPath(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseProcCgroup(t *testing.T) {
	data := "9:name=systemd:/a/b\n4:memory:/a/b\n1:cpu:/\n0::/a/b/c\n\n"
	if got, want := ParseProcCgroup([]byte(data)), []string{"/a/b", "/a/b/c"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ParseProcCgroup = %q, want %q", got, want)
	}
}

func FuzzParseProcCgroup(f *testing.F) {
	f.Add([]byte("0::/kubepods/pod1/abc\n"))
	f.Add([]byte("4:memory:/\n::\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, p := range ParseProcCgroup(data) {
			if p == "" || p == "/" || strings.Contains(p, "\n") {
				t.Fatalf("path %q", p)
			}
		}
	})
}

// fakeHost is a cgroup2 tree and a v1 memory hierarchy in temporary
// directories, with one container cgroup per id.
type fakeHost struct {
	v2, v1 string
}

func (h fakeHost) addContainer(t *testing.T, rel string, oomKills int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(h.v2, rel), 0o755); err != nil {
		t.Fatal(err)
	}
	h.setOOMKills(t, rel, oomKills)
}

func (h fakeHost) setOOMKills(t *testing.T, rel string, n int) {
	t.Helper()
	dir := filepath.Join(h.v1, rel)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"memory.usage_in_bytes": "1048576\n",
		"memory.limit_in_bytes": "33554432\n",
		"memory.failcnt":        "3\n",
		"memory.stat":           "cache 0\nrss 1048576\ntotal_cache 0\ntotal_rss 1048576\ntotal_inactive_file 0\n",
		"memory.oom_control":    fmt.Sprintf("oom_kill_disable 0\nunder_oom 0\noom_kill %d\n", n),
	}
	for name, v := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func cgroupInfo(path string) map[string]string {
	return map[string]string{"info": fmt.Sprintf(`{"pid":1,"runtimeSpec":{"linux":{"cgroupsPath":%q}}}`, path)}
}

func TestCgroupIndexLookup(t *testing.T) {
	h := fakeHost{v2: t.TempDir(), v1: t.TempDir()}
	srv := &runtimeServer{info: map[string]map[string]string{}}
	add := func(id, pod, name, cgroupsPath string) {
		c := ctr(id, "s-"+pod, "ns", pod, name, runtimeapi.ContainerState_CONTAINER_RUNNING, 1)
		c.Labels[LabelPodUID] = "uid-" + pod
		srv.containers = append(srv.containers, c)
		srv.info[id] = cgroupInfo(cgroupsPath)
		h.addContainer(t, CgroupRelPath(cgroupsPath), 0)
	}
	add("a", "web", "nginx", "/kubepods/burstable/poduid-web/a")
	add("b", "db", "pg", "kubepods-besteffort-poduid_db.slice:cri-containerd:b")
	sock := fakecri.Serve(t, srv)
	r, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	x := NewCgroupIndex(r.Client(), CgroupIndexOptions{CgroupV2: h.v2, MemoryV1: h.v1})
	ctx := context.Background()
	if err := x.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	idOf := func(rel string) uint64 {
		id, err := inode(filepath.Join(h.v2, rel))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	rootID := idOf("/")
	goneID := strings.Repeat("0f", 32)
	bRel := CgroupRelPath("kubepods-besteffort-poduid_db.slice:cri-containerd:b")

	tests := []struct {
		name    string
		prepare func()
		victim  func() Victim
		wantCtr string
		wantHow string
		wantErr error
	}{
		{"by cgroup id", nil, func() Victim { return Victim{CgroupID: idOf("/kubepods/burstable/poduid-web/a")} }, "a", ByCgroupID, nil},
		{"by /proc cgroup of a process below the container's cgroup", nil, func() Victim { return Victim{Cgroups: []string{bRel + "/sub"}} }, "b", ByProcCgroup, nil},
		{"root cgroup id, by OOM counter", func() { h.setOOMKills(t, bRel, 1) }, func() Victim { return Victim{CgroupID: rootID} }, "b", ByOOMControl, nil},
		{"the counter is consumed", nil, func() Victim { return Victim{CgroupID: rootID} }, "", "", ErrNotFound},
		{"two counters grew", func() {
			h.setOOMKills(t, bRel, 2)
			h.setOOMKills(t, "/kubepods/burstable/poduid-web/a", 1)
		}, func() Victim { return Victim{} }, "", "", ErrAmbiguous},
		{"a container created after the last refresh", func() {
			add("c", "new", "app", "/kubepods/podnew/c")
			h.setOOMKills(t, "/kubepods/podnew/c", 1)
		}, func() Victim { return Victim{CgroupID: idOf("/kubepods/podnew/c")} }, "c", ByCgroupID, nil},
		{"outside any container", nil, func() Victim { return Victim{CgroupID: rootID, Cgroups: []string{"/system.slice/sshd.service"}} }, "", "", ErrNotFound},
		// A kill of the whole container (memory.oom.group): its task and
		// cgroup were gone before the container was first indexed, so
		// neither its id nor /proc leads to it; the names the kernel gave
		// its cgroup at the kill do.
		{"a whole container killed before it was indexed, by its cgroup's name", func() {
			c := ctr(goneID, "s-gone", "ns", "gone", "hog", runtimeapi.ContainerState_CONTAINER_EXITED, 1)
			c.Labels[LabelPodUID] = "uid-gone"
			srv.containers = append(srv.containers, c)
			srv.info[goneID] = cgroupInfo("kubepods-burstable-poduid_gone.slice:cri-containerd:" + goneID)
		}, func() Victim {
			return Victim{CgroupID: 987654, CgroupNames: []string{"cri-containerd-" + goneID + ".scope", "kubepods-burstable-poduid_gone.slice"}}
		}, goneID, ByCgroupName, nil},
		{"a process in a subgroup of the container's scope, by its parent's name", nil, func() Victim {
			return Victim{CgroupID: 987655, CgroupNames: []string{"container", "cri-containerd-" + goneID + ".scope"}}
		}, goneID, ByCgroupName, nil},
		{"the runtime's monitor named for the container is not the container", nil, func() Victim {
			return Victim{CgroupID: 987656, CgroupNames: []string{"crio-conmon-" + goneID + ".scope", "kubepods-burstable-poduid_gone.slice"}}
		}, "", "", ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.prepare != nil {
				tt.prepare()
			}
			w, how, err := x.Lookup(ctx, tt.victim())
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Lookup = %+v, %q, %v; want %v", w, how, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if w.ContainerID != tt.wantCtr || how != tt.wantHow {
				t.Fatalf("Lookup = %+v by %q, want %s by %s", w, how, tt.wantCtr, tt.wantHow)
			}
			if w.PodUID != "uid-"+w.Pod || w.Namespace != "ns" || w.PodSandboxID != "s-"+w.Pod {
				t.Errorf("names: %+v", w)
			}
		})
	}
}

func TestContainerIDFromCgroupName(t *testing.T) {
	id := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name, in, want string
	}{
		{"containerd, systemd driver", "cri-containerd-" + id + ".scope", id},
		{"CRI-O, systemd driver", "crio-" + id + ".scope", id},
		{"docker", "docker-" + id + ".scope", id},
		{"podman", "libpod-" + id + ".scope", id},
		{"cgroupfs driver", id, id},
		{"short id", "crio-0123456789ab.scope", "0123456789ab"},
		{"CRI-O's conmon", "crio-conmon-" + id + ".scope", ""},
		{"libpod's conmon", "libpod-conmon-" + id + ".scope", ""},
		{"a pod's slice", "kubepods-burstable-pod" + id + ".slice", ""},
		{"a pod's cgroupfs directory", "pod" + id, ""},
		{"a subgroup", "container", ""},
		{"a scope without a dash", id + ".scope", ""},
		{"upper case", strings.ToUpper(id), ""},
		{"too long", id + "00", ""},
		{"too short", "crio-0123.scope", ""},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ContainerIDFromCgroupName(tc.in)
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("ContainerIDFromCgroupName(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
			}
		})
	}
}

func FuzzContainerIDFromCgroupName(f *testing.F) {
	f.Add("cri-containerd-" + strings.Repeat("ab", 32) + ".scope")
	f.Add("crio-conmon-0123456789ab.scope")
	f.Add("kubepods.slice")
	f.Fuzz(func(t *testing.T, name string) {
		id, ok := ContainerIDFromCgroupName(name)
		if !ok {
			if id != "" {
				t.Fatalf("%q: id %q without ok", name, id)
			}
			return
		}
		if len(id) < 12 || len(id) > 64 || strings.Trim(id, "0123456789abcdef") != "" || !strings.Contains(name, id) {
			t.Fatalf("%q: id %q", name, id)
		}
	})
}

func FuzzCgroupRelPath(f *testing.F) {
	f.Add("/kubepods/burstable/pod1/abc")
	f.Add("kubepods-burstable-pod1_2.slice:cri-containerd:abc")
	f.Add("::")
	f.Fuzz(func(t *testing.T, s string) {
		p := CgroupRelPath(s)
		if !strings.HasPrefix(p, "/") {
			t.Fatalf("CgroupRelPath(%q) = %q, not absolute", s, p)
		}
	})
}

// TestCgroupIndexLookupByExitReason: a kill that took its whole container
// (the task gone by the event, the cgroup gone by the lookup) is named by
// the one container the runtime then reports exited OOMKilled since the
// kill, and so are the other tasks of the same group kill (the same
// cgroup id); an exit names no kill of another cgroup; an exit older than
// the kill, or a victim whose task was still there, is not taken.
func TestCgroupIndexLookupByExitReason(t *testing.T) {
	srv := &runtimeServer{info: map[string]map[string]string{}}
	sock := fakecri.Serve(t, srv)
	r, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	x := NewCgroupIndex(r.Client(), CgroupIndexOptions{CgroupV2: t.TempDir()})
	kill := time.Now()
	exited := func(id, pod, reason string, finished time.Time) {
		c := ctr(id, "s-"+pod, "ns", pod, "app", runtimeapi.ContainerState_CONTAINER_EXITED, 1)
		c.Labels[LabelPodUID] = "uid-" + pod
		srv.exit(c, &runtimeapi.ContainerStatus{Id: id, State: runtimeapi.ContainerState_CONTAINER_EXITED,
			Reason: reason, FinishedAt: finished.UnixNano(), ExitCode: 137})
	}
	exited("old", "before", ReasonOOMKilled, kill.Add(-time.Minute))
	exited("done", "done", "Completed", kill.Add(time.Second))
	lookup := func(v Victim, wait time.Duration) (Workload, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		return x.Lookup(ctx, v)
	}
	// The runtime reports the exit a moment after the kill event.
	go func() {
		time.Sleep(300 * time.Millisecond)
		exited("hog", "hog", ReasonOOMKilled, kill.Add(200*time.Millisecond))
	}()
	w, how, err := lookup(Victim{CgroupID: 12345, Time: kill}, time.Minute)
	if err != nil || w.ContainerID != "hog" || how != ByExitReason || w.Pod != "hog" || w.PodUID != "uid-hog" {
		t.Fatalf("Lookup = %+v by %q, %v; want hog by %s", w, how, err, ByExitReason)
	}
	// The other tasks of the same group kill: the same cgroup id.
	if w, how, err := lookup(Victim{CgroupID: 12345, Time: kill}, time.Minute); err != nil || w.ContainerID != "hog" || how != ByExitReason {
		t.Errorf("another task of the group kill: %+v by %q, %v; want hog", w, how, err)
	}
	if _, _, err := lookup(Victim{CgroupID: 777, Time: kill}, 500*time.Millisecond); !errors.Is(err, ErrNotFound) {
		t.Errorf("a kill in another cgroup named by the same exit: %v", err)
	}
	exited("alive", "alive", ReasonOOMKilled, kill.Add(time.Second))
	if _, _, err := lookup(Victim{CgroupID: 888, Time: kill, Cgroups: []string{"/system.slice/sshd.service"}}, time.Minute); !errors.Is(err, ErrNotFound) {
		t.Errorf("a victim of the host's own, outside kubepods: %v", err)
	}
	// A victim whose task was still there, in a pod's cgroup that the
	// runtime no longer lists: named by the exit.
	if w, how, err := lookup(Victim{CgroupID: 889, Time: kill, Cgroups: []string{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podx.slice/cri-containerd-alive.scope"}}, time.Minute); err != nil || w.ContainerID != "alive" || how != ByExitReason {
		t.Errorf("a victim below kubepods: %+v by %q, %v; want alive", w, how, err)
	}
	exited("twin", "twin", ReasonOOMKilled, kill.Add(time.Second))
	exited("triplet", "triplet", ReasonOOMKilled, kill.Add(time.Second))
	if _, _, err := lookup(Victim{CgroupID: 999, Time: kill}, time.Minute); !errors.Is(err, ErrAmbiguous) {
		t.Errorf("two OOM exits since the kill: %v, want ambiguous", err)
	}
}
