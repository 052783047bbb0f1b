package bpf

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/internal/procfs"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

func requireBPF(t testing.TB) {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/sys/kernel/btf/vmlinux")
}

// countOf returns the count recorded for syscall nr, 0 when absent.
func countOf(counts []SyscallCount, nr uint32) uint64 {
	for _, c := range counts {
		if c.Nr == nr {
			return c.Count
		}
	}
	return 0
}

// gatedRun starts cmd blocked on its stdin, calls attach with its pid,
// releases it and waits for it.
func gatedRun(t *testing.T, cmd *exec.Cmd, attach func(pid int)) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	attach(cmd.Process.Pid)
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("workload %v: %v", cmd.Args, err)
	}
}

// noise makes sysinfo calls from the test process itself, outside every
// target, while a recording runs: none of them may be counted.
func noise(t *testing.T) {
	t.Helper()
	var si unix.Sysinfo_t
	for range 50 {
		if err := unix.Sysinfo(&si); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRecorderTargets(t *testing.T) {
	requireBPF(t)
	cg2, err := cgroup.MountUnder("/sys")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		cmd  func() *exec.Cmd
		// target returns the recorder's target for the started workload.
		target func(t *testing.T, pid int) Target
		want   uint64
		procs  int // processes that exit in the target
	}{
		{
			name: "process tree follows forks",
			cmd:  func() *exec.Cmd { return workloadCommand("tree", "7", "5") },
			target: func(t *testing.T, pid int) Target {
				return ProcessTreeTarget(uint32(pid))
			},
			want: 7 + 5, procs: 2,
		},
		{
			// Another key in the same slot of the direct-mapped table:
			// the slot is mixed and the lookup falls back to the map.
			name: "process tree sharing its slot",
			cmd:  func() *exec.Cmd { return workloadCommand("tree", "3", "8") },
			target: func(t *testing.T, pid int) Target {
				tgt := ProcessTreeTarget(uint32(pid))
				for k := uint64(1) << 32; ; k++ {
					if slotOf(k) == slotOf(uint64(pid)) {
						tgt.Keys = append(tgt.Keys, k) // no pid is that large
						return tgt
					}
				}
			},
			want: 3 + 8, procs: 2,
		},
		{
			name: "mount namespace",
			cmd: func() *exec.Cmd {
				c := workloadCommand("sysinfo", "9")
				c.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
				return c
			},
			target: func(t *testing.T, pid int) Target {
				ns, err := procfs.MountNS("/proc", pid)
				if err != nil {
					t.Fatal(err)
				}
				self, err := procfs.MountNS("/proc", os.Getpid())
				if err != nil {
					t.Fatal(err)
				}
				if ns == self {
					t.Fatalf("workload shares the test's mount namespace %d", ns)
				}
				return MountNSTarget(ns)
			},
			want: 9, procs: 1,
		},
		{
			name: "cgroup v2 subtree",
			cmd: func() *exec.Cmd {
				return workloadCommand("tree", "4", "6")
			},
			target: func(t *testing.T, pid int) Target {
				dir, err := os.MkdirTemp(cg2, "nodeshim-test-")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.Remove(dir) })
				if err := os.WriteFile(dir+"/cgroup.procs", []byte(strconv.Itoa(pid)), 0); err != nil {
					t.Fatal(err)
				}
				tgt, err := CgroupTargetFromPath(cg2, dir)
				if err != nil {
					t.Fatal(err)
				}
				if tgt.CgroupLevel != 1 {
					t.Fatalf("level of %s = %d, want 1", dir, tgt.CgroupLevel)
				}
				return tgt
			},
			want: 4 + 6, procs: 2,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var rec *Recorder
			gatedRun(t, tc.cmd(), func(pid int) {
				var err error
				rec, err = NewRecorder(tc.target(t, pid))
				if err != nil {
					t.Fatal(err)
				}
				noise(t)
			})
			defer rec.Close()
			noise(t)
			counts, err := rec.Counts()
			if err != nil {
				t.Fatal(err)
			}
			if got := countOf(counts, unix.SYS_SYSINFO); got != tc.want {
				t.Errorf("sysinfo count = %d, want %d (counts %v)", got, tc.want, counts)
			}
			// Go's os/exec may fork one more short-lived child to probe
			// for pidfd support, so at least one exit per process.
			if countOf(counts, unix.SYS_EXIT_GROUP) < uint64(tc.procs) {
				t.Errorf("exit_group count = %d, want >= %d (counts %v)", countOf(counts, unix.SYS_EXIT_GROUP), tc.procs, counts)
			}
		})
	}
}

func TestRecordCommand(t *testing.T) {
	requireBPF(t)
	cg2, err := cgroup.MountUnder("/sys")
	if err != nil {
		t.Fatal(err)
	}
	counts, runErr, err := RecordCommand(cg2, workloadCommand("sysinfo-now", "11"))
	if err != nil {
		t.Fatal(err)
	}
	if runErr != nil {
		t.Fatalf("workload: %v", runErr)
	}
	if got := countOf(counts, unix.SYS_SYSINFO); got != 11 {
		t.Errorf("sysinfo count = %d, want 11", got)
	}
	// Started into the cgroup by clone3, the recording sees the execve
	// that turns the child into the workload.
	if countOf(counts, unix.SYS_EXECVE) == 0 {
		t.Errorf("execve not recorded: %v", counts)
	}
	entries, err := os.ReadDir(cg2)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), fmt.Sprintf("nodeshim-record-%d-", os.Getpid())) {
			t.Errorf("recording cgroup %s left behind", e.Name())
		}
	}
}

// kernelIDs lists the ids of every BPF program, map and link loaded in the
// kernel, as "prog 12", "map 7", "link 3".
func kernelIDs(t *testing.T) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for id := ebpf.ProgramID(0); ; {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ids[fmt.Sprintf("prog %d", next)] = true
		id = next
	}
	for id := ebpf.MapID(0); ; {
		next, err := ebpf.MapGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ids[fmt.Sprintf("map %d", next)] = true
		id = next
	}
	it := new(link.Iterator)
	for it.Next() {
		ids[fmt.Sprintf("link %d", it.ID)] = true
		it.Link.Close()
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// recorderIDs names the kernel objects that rec holds, including the maps
// that its programs use but it holds no descriptor of (.rodata).
func recorderIDs(t *testing.T, rec *Recorder) []string {
	t.Helper()
	var ids []string
	for _, p := range []*ebpf.Program{rec.objs.RecordSysEnter, rec.objs.RecordFork, rec.objs.RecordExit} {
		if p == nil {
			continue
		}
		info, err := p.Info()
		if err != nil {
			t.Fatal(err)
		}
		id, _ := info.ID()
		ids = append(ids, fmt.Sprintf("prog %d", id))
		mapIDs, _ := info.MapIDs()
		for _, m := range mapIDs {
			ids = append(ids, fmt.Sprintf("map %d", m))
		}
	}
	for _, l := range rec.links {
		info, err := l.Info()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, fmt.Sprintf("link %d", info.ID))
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

func TestRecorderCloseLeavesNothing(t *testing.T) {
	requireBPF(t)
	for _, target := range []Target{
		ProcessTreeTarget(uint32(os.Getpid())),
		MountNSTarget(1),
		CgroupTarget(1, 0),
	} {
		t.Run(target.Kind.String(), func(t *testing.T) {
			rec, err := NewRecorder(target)
			if err != nil {
				t.Fatal(err)
			}
			ours := recorderIDs(t, rec)
			wantLinks := 1
			if target.Kind == TargetProcessTree {
				wantLinks = 3
			}
			loaded := kernelIDs(t)
			var links int
			for _, id := range ours {
				if !loaded[id] {
					t.Errorf("%s not listed by the kernel while attached", id)
				}
				if strings.HasPrefix(id, "link ") {
					links++
				}
			}
			if links != wantLinks {
				t.Errorf("%d links attached, want %d: %v", links, wantLinks, ours)
			}
			if err := rec.Close(); err != nil {
				t.Fatal(err)
			}
			if err := rec.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			// The kernel frees programs and maps after an RCU grace period
			// and a workqueue pass (kernel/bpf/syscall.c:
			// bpf_prog_put_deferred, bpf_map_free_deferred), so their ids
			// disappear shortly after Close rather than during it.
			testutil.Eventually(t, fmt.Sprintf("the programs and maps %v are freed after Close", ours), func() error {
				loaded := kernelIDs(t)
				var left []string
				for _, id := range ours {
					if loaded[id] {
						left = append(left, id)
					}
				}
				if len(left) > 0 {
					return fmt.Errorf("still loaded: %v", left)
				}
				return nil
			})
		})
	}
}

func TestRecorderRejectsEmptyTarget(t *testing.T) {
	cases := []struct {
		name   string
		target Target
	}{
		{"no keys", Target{Kind: TargetCgroup}},
		{"unknown kind", Target{Kind: 9, Keys: []uint64{1}}},
		{"zero", Target{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewRecorder(tc.target)
			if !errors.Is(err, ErrNoTarget) {
				t.Fatalf("err = %v, want ErrNoTarget", err)
			}
		})
	}
}

// TestVerifierErrorSurfaces loads the recorder with its sys_enter program
// broken (an out-of-bounds stack read appended before exit) and checks that
// the error carries the verifier log's last lines instead of panicking.
func TestVerifierErrorSurfaces(t *testing.T) {
	requireBPF(t)
	spec, err := loadRecorder()
	if err != nil {
		t.Fatal(err)
	}
	ps := spec.Programs[recorderProgRecordSysEnter]
	ps.Instructions = asm.Instructions{
		asm.LoadMem(asm.R0, asm.RFP, 8, asm.DWord), // above the frame: rejected
		asm.Return(),
	}
	var objs recorderObjects
	err = newLoadError("recorder", spec.LoadAndAssign(&objs, nil))
	objs.Close()
	var le *LoadError
	if !errors.As(err, &le) {
		t.Fatalf("err = %v, want *LoadError", err)
	}
	var ve *ebpf.VerifierError
	if !errors.As(err, &ve) {
		t.Fatalf("LoadError does not wrap *ebpf.VerifierError: %v", err)
	}
	if len(le.VerifierTail) == 0 || len(le.VerifierTail) > verifierTailLines {
		t.Fatalf("verifier tail has %d lines: %q", len(le.VerifierTail), le.VerifierTail)
	}
	msg := err.Error()
	if !strings.Contains(msg, "verifier log (last lines)") || !strings.Contains(msg, "invalid") {
		t.Errorf("error lacks the verifier's reason:\n%s", msg)
	}
	t.Logf("error as users see it:\n%s", msg)
}
