package vmtest

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/internal/testutil"
)

// capSysResource reports whether CAP_SYS_RESOURCE is in this process's
// effective set (/proc/self/status CapEff, bit 24).
func capSysResource(t *testing.T) bool {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("parse CapEff %q: %v", v, err)
			}
			return caps&(1<<unix.CAP_SYS_RESOURCE) != 0
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return false
}

// TestHostNeedsGuests asserts the facts of this machine that make guests
// necessary, the counterpart of the guest tests in guest_vm_test.go: the
// host's cgroups are hybrid (v1 hierarchies, cgroup2 only at
// /sys/fs/cgroup/unified), and without CAP_SYS_RESOURCE a PSI trigger is
// accepted only with a window that is a multiple of 2 s (kernel/sched/psi.c
// since 6.5 treats such a writer as unprivileged), so the 1 s window the
// guests use is refused with EINVAL.
func TestHostNeedsGuests(t *testing.T) {
	testutil.RequireRoot(t)
	if label, ok := testutil.InGuest(); ok {
		testutil.Skip(t, "asserts the host's facts; this is guest %s", label)
	}
	t.Run("hybrid cgroups", func(t *testing.T) {
		if got := statfsMagic(t, "/sys/fs/cgroup"); got == unix.CGROUP2_SUPER_MAGIC {
			t.Fatal("/sys/fs/cgroup is cgroup2: this host is pure cgroup v2, not hybrid")
		}
		if got := statfsMagic(t, "/sys/fs/cgroup/memory"); got != unix.CGROUP_SUPER_MAGIC {
			t.Errorf("/sys/fs/cgroup/memory has magic %#x, want cgroup v1 %#x", got, unix.CGROUP_SUPER_MAGIC)
		}
		if got := statfsMagic(t, "/sys/fs/cgroup/unified"); got != unix.CGROUP2_SUPER_MAGIC {
			t.Errorf("/sys/fs/cgroup/unified has magic %#x, want cgroup2 %#x", got, unix.CGROUP2_SUPER_MAGIC)
		}
	})
	t.Run("PSI trigger windows", func(t *testing.T) {
		testutil.RequireFile(t, "/proc/pressure/memory")
		privileged := capSysResource(t)
		cases := []struct {
			trigger  string
			accepted bool
		}{
			{"some 100000 1000000", privileged},
			{"some 150000 2000000", true},
		}
		for _, tc := range cases {
			f, err := os.OpenFile("/proc/pressure/memory", os.O_RDWR|unix.O_NONBLOCK, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.Write([]byte(tc.trigger + "\x00"))
			f.Close()
			if tc.accepted && err != nil {
				t.Errorf("trigger %q refused (CAP_SYS_RESOURCE %v): %v", tc.trigger, privileged, err)
			}
			if !tc.accepted && !errors.Is(err, unix.EINVAL) {
				t.Errorf("trigger %q: error %v, want EINVAL without CAP_SYS_RESOURCE", tc.trigger, err)
			}
		}
	})
}

func statfsMagic(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatalf("statfs %s: %v", path, err)
	}
	return int64(st.Type)
}
