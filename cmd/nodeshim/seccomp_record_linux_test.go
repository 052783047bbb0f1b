package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// bpfIDsHeldBy returns the BPF program and link ids that process pid holds
// descriptors of, from /proc/PID/fdinfo (prog_id:, link_id:).
func bpfIDsHeldBy(t *testing.T, pid int) (progs []ebpf.ProgramID) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		for _, line := range strings.Split(string(data), "\n") {
			var id uint32
			if _, err := fmt.Sscanf(line, "prog_id:\t%d", &id); err == nil {
				progs = append(progs, ebpf.ProgramID(id))
			}
		}
	}
	slices.Sort(progs)
	return slices.Compact(progs)
}

func programLoaded(t *testing.T, id ebpf.ProgramID) bool {
	t.Helper()
	p, err := ebpf.NewProgramFromID(id)
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	return true
}

// TestSeccompRecordPIDUntilSIGTERM records a running shell loop by pid
// (a process tree: same mount namespace as the test), stops nodeshim with
// SIGTERM and expects the profile to be written and every program that
// nodeshim held to be gone from the kernel.
func TestSeccompRecordPIDUntilSIGTERM(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/sys/kernel/btf/vmlinux")
	sh := testutil.RequireBinary(t, "sh")
	dir := t.TempDir()
	tick := filepath.Join(dir, "tick")
	// Each round forks and execs date(1), which rewrites tick.
	loop := exec.Command(sh, "-c", "while :; do date +%s%N > "+tick+"; sleep 0.05; done")
	if err := loop.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		loop.Process.Kill()
		loop.Wait()
	}()

	profile := filepath.Join(dir, "profile.json")
	args, err := json.Marshal([]string{"seccomp", "record", "--out-file", profile, "--pid", fmt.Sprint(loop.Process.Pid)})
	if err != nil {
		t.Fatal(err)
	}
	rec := exec.Command(os.Args[0], "-test.run=^TestSeccompHelperProcess$")
	rec.Env = append(os.Environ(), "NODESHIM_TEST_MAIN_ARGS="+string(args))
	stderr, err := rec.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout strings.Builder
	rec.Stdout = &stdout
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	// "recording" is logged once the programs are attached.
	sc := bufio.NewScanner(stderr)
	var log []string
	for sc.Scan() {
		log = append(log, sc.Text())
		if strings.Contains(sc.Text(), "recording") {
			break
		}
	}
	held := bpfIDsHeldBy(t, rec.Process.Pid)
	if len(held) != 3 {
		t.Errorf("nodeshim holds programs %v, want the 3 of a process-tree recording", held)
	}
	// Let the loop run two rounds under the recorder.
	first, _ := os.ReadFile(tick)
	for changes, last := 0, first; changes < 2; time.Sleep(10 * time.Millisecond) {
		if now, _ := os.ReadFile(tick); len(now) > 0 && string(now) != string(last) {
			changes, last = changes+1, now
		}
	}
	if err := rec.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
		log = append(log, sc.Text())
	}
	if err := rec.Wait(); err != nil {
		t.Fatalf("record after SIGTERM: %v\n%s", err, strings.Join(log, "\n"))
	}
	data, err := os.ReadFile(profile)
	if err != nil {
		t.Fatalf("no profile after SIGTERM: %v", err)
	}
	for _, want := range []string{`"execve"`, `"wait4"`, `"clock_nanosleep"`, `"SCMP_ACT_ERRNO"`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("profile lacks %s:\n%s", want, data)
		}
	}
	if stdout.Len() != 0 || !strings.Contains(strings.Join(log, "\n"), "execve") {
		t.Errorf("the table is not on stderr alone: stdout %q, stderr:\n%s", stdout.String(), strings.Join(log, "\n"))
	}
	// The kernel frees programs after an RCU grace period once the last
	// descriptor is closed; poll for that.
	testutil.Eventually(t, "the programs nodeshim held are freed after it exited", func() error {
		if left := slices.DeleteFunc(slices.Clone(held), func(id ebpf.ProgramID) bool { return !programLoaded(t, id) }); len(left) > 0 {
			return fmt.Errorf("programs %v still loaded", left)
		}
		return nil
	})
}

// TestSeccompRecordCgroup records a shell loop through its cgroup for a
// fixed duration: a cgroup v2 directory (matched by cgroup id) wherever
// this machine mounts cgroup2, and on a hybrid machine also a cgroup v1
// memory cgroup (followed as a process tree).
func TestSeccompRecordCgroup(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/sys/kernel/btf/vmlinux")
	sh := testutil.RequireBinary(t, "sh")
	mnt, err := cgroup.FindMount("/proc")
	if err != nil {
		t.Fatal(err)
	}
	type recordCase struct {
		name   string
		parent string
	}
	cases := []recordCase{{"cgroup v2", mnt.Path}}
	if slices.Contains(mnt.V1Controllers, "memory") {
		cases = append(cases, recordCase{"cgroup v1 memory", "/sys/fs/cgroup/memory"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			testutil.RequireFile(t, filepath.Join(tc.parent, "cgroup.procs"))
			cg, err := os.MkdirTemp(tc.parent, "nodeshim-record-test-")
			if err != nil {
				t.Fatal(err)
			}
			loop := exec.Command(sh, "-c", "read x; while :; do date > /dev/null; sleep 0.05; done")
			loop.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			stdin, err := loop.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := loop.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				// The loop's children (sleep, date) must be gone too
				// before the cgroup can be removed.
				syscall.Kill(-loop.Process.Pid, syscall.SIGKILL)
				loop.Wait()
				testutil.Eventually(t, "the loop's processes leave "+cg, func() error {
					if procs, err := os.ReadFile(filepath.Join(cg, "cgroup.procs")); err != nil || len(procs) > 0 {
						return fmt.Errorf("cgroup.procs: %q, %v", procs, err)
					}
					return nil
				})
				if err := os.Remove(cg); err != nil {
					t.Errorf("remove %s: %v", cg, err)
				}
			}()
			if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(fmt.Sprint(loop.Process.Pid)), 0); err != nil {
				t.Fatal(err)
			}
			stdin.Write([]byte("go\n"))
			profile := filepath.Join(t.TempDir(), "p.json")
			_, stderr, code := runMain(t, "seccomp", "record", "--out-file", profile, "--cgroup", cg, "--duration", "700ms")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			data, err := os.ReadFile(profile)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{`"execve"`, `"wait4"`, `"clock_nanosleep"`} {
				if !strings.Contains(string(data), want) {
					t.Errorf("profile lacks %s:\n%s", want, data)
				}
			}
		})
	}
}
