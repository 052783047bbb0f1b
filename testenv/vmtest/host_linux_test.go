package vmtest

import (
	"bufio"
	"errors"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/testenv/testutil"
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

// unameAtLeast reports whether the running kernel's release is at least
// major.minor.
func unameAtLeast(t *testing.T, major, minor int) bool {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	rel := unix.ByteSliceToString(u.Release[:])
	m := regexp.MustCompile(`^(\d+)\.(\d+)`).FindStringSubmatch(rel)
	if m == nil {
		t.Fatalf("uname release %q has no version", rel)
	}
	maj, _ := strconv.Atoi(m[1])
	min, _ := strconv.Atoi(m[2])
	return maj > major || maj == major && min >= minor
}

// TestHostNeedsGuests establishes, from the kernel itself, the two facts of
// a machine that decide what only a guest can test, the counterpart of the
// guest tests in guest_vm_test.go: whether its cgroups are pure v2, and
// whether this process may arm a PSI trigger with the 1 s window the guests
// use (kernel/sched/psi.c since 6.5 takes from a writer without
// CAP_SYS_RESOURCE only windows that are multiples of 2 s). Each is read
// two ways that must agree; the test logs which guest-only facts this host
// lacks.
func TestHostNeedsGuests(t *testing.T) {
	testutil.RequireRoot(t)
	t.Run("cgroup layout", func(t *testing.T) {
		// The hierarchies the kernel lists for this process...
		b, err := os.ReadFile("/proc/self/cgroup")
		if err != nil {
			t.Fatal(err)
		}
		var v1 []string
		v2 := false
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 {
				t.Fatalf("/proc/self/cgroup line %q", line)
			}
			if parts[0] == "0" {
				v2 = true
				continue
			}
			for _, c := range strings.Split(parts[1], ",") {
				if c != "" && !strings.HasPrefix(c, "name=") {
					v1 = append(v1, c)
				}
			}
		}
		// ...and the cgroup filesystems mounted, each checked by its
		// statfs magic.
		b, err = os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		var mountedV1 []string
		mountedV2 := false
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			left, right, ok := strings.Cut(line, " - ")
			lf, rf := strings.Fields(left), strings.Fields(right)
			if !ok || len(lf) < 5 || len(rf) < 3 {
				t.Fatalf("mountinfo line %q", line)
			}
			switch rf[0] {
			case "cgroup2":
				mountedV2 = true
				if got := statfsMagic(t, lf[4]); got != unix.CGROUP2_SUPER_MAGIC {
					t.Errorf("cgroup2 mount %s has magic %#x", lf[4], got)
				}
			case "cgroup":
				if got := statfsMagic(t, lf[4]); got != unix.CGROUP_SUPER_MAGIC {
					t.Errorf("cgroup mount %s has magic %#x", lf[4], got)
				}
				for _, o := range strings.Split(rf[2], ",") {
					if !cgroupMountOption(o) && !slices.Contains(mountedV1, o) {
						mountedV1 = append(mountedV1, o)
					}
				}
			}
		}
		slices.Sort(v1)
		slices.Sort(mountedV1)
		if !slices.Equal(v1, mountedV1) || v2 != mountedV2 {
			t.Fatalf("/proc/self/cgroup has v1 %v, cgroup2 %v; the mount table v1 %v, cgroup2 %v", v1, v2, mountedV1, mountedV2)
		}
		pure := v2 && len(v1) == 0 && statfsMagic(t, "/sys/fs/cgroup") == unix.CGROUP2_SUPER_MAGIC
		if !pure {
			t.Logf("not pure cgroup v2 at /sys/fs/cgroup (v1 controllers %v, cgroup2 %v): the guests test that", v1, v2)
		}
	})
	t.Run("PSI trigger windows", func(t *testing.T) {
		const path = "/proc/pressure/memory"
		if _, err := os.ReadFile(path); err != nil {
			t.Logf("no PSI (%v): the guests test it", err)
			return
		}
		privileged := capSysResource(t)
		write := func(trigger string) error {
			f, err := os.OpenFile(path, os.O_RDWR|unix.O_NONBLOCK, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.Write([]byte(trigger + "\x00"))
			return err
		}
		oneSecond, twoSeconds := write("some 100000 1000000"), write("some 150000 2000000")
		switch {
		case privileged && oneSecond != nil:
			t.Errorf("1 s window refused with CAP_SYS_RESOURCE: %v", oneSecond)
		case !privileged && unameAtLeast(t, 6, 5) && (!errors.Is(oneSecond, unix.EINVAL) || twoSeconds != nil):
			t.Errorf("without CAP_SYS_RESOURCE on 6.5+: 1 s window %v, 2 s window %v; want EINVAL, then armed", oneSecond, twoSeconds)
		case !privileged && !unameAtLeast(t, 6, 5) && oneSecond == nil:
			t.Error("1 s window armed without CAP_SYS_RESOURCE before 6.5")
		}
		if oneSecond != nil {
			t.Logf("1 s PSI windows refused here (%v): the guests test triggers", oneSecond)
		}
	})
}

// cgroupMountOption reports whether o, a super option of a cgroup v1
// mount, is an option rather than a controller name.
func cgroupMountOption(o string) bool {
	switch o {
	case "rw", "ro", "none", "noprefix", "clone_children", "xattr", "cpuset_v2_mode", "favordynmods", "nofavordynmods":
		return true
	}
	return strings.HasPrefix(o, "name=") || strings.HasPrefix(o, "release_agent=")
}

func statfsMagic(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatalf("statfs %s: %v", path, err)
	}
	return int64(st.Type)
}
