package criu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPIDTargetOfThisProcess(t *testing.T) {
	now := time.Now()
	tg, err := PIDTarget("/proc", os.Getpid(), now)
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Validate(); err != nil {
		t.Fatal(err)
	}
	if tg.Ref.Namespace != "host" || tg.Ref.Pod == "" || tg.Ref.Container == "" || len(tg.Args) == 0 {
		t.Errorf("target %+v", tg)
	}
	if tg.Created.After(now) || now.Sub(tg.Created) > 10*time.Minute {
		t.Errorf("this test process started at %v, now is %v", tg.Created, now)
	}
}

func TestParseStats(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"short", []byte{1, 2, 3}},
		{"wrong magic", make([]byte, 16)},
		{"length past the end", []byte{0x40, 0x59, 0x10, 0x55, 0x06, 0x33, 0x09, 0x57, 0xff, 0xff, 0, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := parseStats(tc.in); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func FuzzParseStats(f *testing.F) {
	f.Add([]byte{0x40, 0x59, 0x10, 0x55, 0x06, 0x33, 0x09, 0x57, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parseStats(b)
	})
}

// TestEnsureRunningThaws: a freeze cgroup that a killed CRIU left frozen
// is thawed, one frozen before the checkpoint is left alone.
func TestEnsureRunningThaws(t *testing.T) {
	for _, tc := range []struct {
		name, file, state, want string
		frozenBefore            bool
	}{
		{name: "v1-frozen", file: "freezer.state", state: "FROZEN", want: "THAWED"},
		{name: "v1-freezing", file: "freezer.state", state: "FREEZING", want: "THAWED"},
		{name: "v1-thawed", file: "freezer.state", state: "THAWED", want: "THAWED"},
		{name: "v1-frozen-before", file: "freezer.state", state: "FROZEN", want: "FROZEN", frozenBefore: true},
		{name: "v2-frozen", file: "cgroup.freeze", state: "1", want: "0"},
		{name: "v2-thawed", file: "cgroup.freeze", state: "0", want: "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, tc.file)
			if err := os.WriteFile(p, []byte(tc.state), 0o600); err != nil {
				t.Fatal(err)
			}
			before, err := ReadProcState("/proc", os.Getpid())
			if err != nil {
				t.Fatal(err)
			}
			o := Options{}
			o.defaults()
			tg := Target{Pid: os.Getpid(), Container: ContainerOptions{FreezeCgroup: dir}}
			if err := ensureRunning(o, tg, before, tc.frozenBefore); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(string(b)); got != tc.want {
				t.Errorf("%s = %q, want %q", tc.file, b, tc.want)
			}
		})
	}
}
