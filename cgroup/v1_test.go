package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestParseV1Mount(t *testing.T) {
	const hybrid = `25 30 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
31 25 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
32 25 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
40 25 0:28 /sub /mnt/memsub rw - cgroup cgroup rw,memory
`
	const unified = "26 25 0:23 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
	for _, tc := range []struct {
		name, data, ctrl, want string
		wantErr                error
	}{
		{"hybrid memory", hybrid, "memory", "/sys/fs/cgroup/memory", nil},
		{"co-mounted controller", hybrid, "cpuacct", "/sys/fs/cgroup/cpu,cpuacct", nil},
		{"unbound controller", hybrid, "pids", "", ErrNoV1Hierarchy},
		{"pure v2", unified, "memory", "", ErrNoV1Hierarchy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseV1Mount([]byte(tc.data), tc.ctrl)
			if got != tc.want || !errors.Is(err, tc.wantErr) {
				t.Errorf("ParseV1Mount(%s) = %q, %v; want %q, %v", tc.ctrl, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestReadMemoryV1(t *testing.T) {
	write := func(dir string, files map[string]string) {
		for k, v := range files {
			if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	full := map[string]string{
		"memory.usage_in_bytes": "10485760\n",
		"memory.limit_in_bytes": "9223372036854771712\n",
		"memory.failcnt":        "0\n",
		"memory.stat":           "cache 4096\nrss 8192\nhierarchical_memory_limit 9223372036854771712\ntotal_cache 2097152\ntotal_rss 8388608\ntotal_inactive_file 1048576\n",
		"memory.oom_control":    "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
	}
	r := NewReader()
	dir := t.TempDir()
	write(dir, full)
	got, err := r.ReadMemoryV1(dir)
	want := MemoryV1{Usage: 10 << 20, Limit: Limit{Unlimited: true}, RSS: 8 << 20, Cache: 2 << 20, InactiveFile: 1 << 20, OOMKill: 3}
	if err != nil || got != want {
		t.Fatalf("ReadMemoryV1 = %+v, %v; want %+v", got, err, want)
	}
	if ws := got.WorkingSet(); ws != 9<<20 {
		t.Errorf("working set %d", ws)
	}
	limited := t.TempDir()
	write(limited, full)
	write(limited, map[string]string{"memory.limit_in_bytes": "33554432\n"})
	if got, _ := r.ReadMemoryV1(limited); got.Limit != (Limit{Value: 32 << 20}) {
		t.Errorf("limit %+v", got.Limit)
	}
	missing := t.TempDir()
	write(missing, map[string]string{"memory.usage_in_bytes": "1\n"})
	if got, err := r.ReadMemoryV1(missing); err != nil || !errors.Is(got.Err, ErrMissing) {
		t.Errorf("without the other files: %+v, %v", got, err)
	}
	if _, err := r.ReadMemoryV1(filepath.Join(dir, "gone")); !errors.Is(err, ErrVanished) {
		t.Errorf("a removed cgroup: %v", err)
	}
}
