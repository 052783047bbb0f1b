package procfs

import (
	"errors"
	"os"
	"slices"
	"testing"
)

func TestParseStat(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		want    int
		wantErr bool
	}{
		{"plain", "42 (bash) S 7 42 42 34816 42 4194304", 7, false},
		{"comm with spaces and parentheses", "42 (a) b (c) S 9 42", 9, false},
		{"kernel thread", "2 (kthreadd) S 0 0 0", 0, false},
		{"no comm", "42 bash S 7", 0, true},
		{"truncated after comm", "42 (bash) S", 0, true},
		{"ppid not a number", "42 (bash) S x 1", 0, true},
		{"negative ppid", "42 (bash) S -3 1", 0, true},
		{"empty", "", 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseStat([]byte(tc.in))
			if (err != nil) != tc.wantErr || got.PPID != tc.want {
				t.Fatalf("ParseStat(%q) = %+v, %v; want ppid %d, error %v", tc.in, got, err, tc.want, tc.wantErr)
			}
			if err != nil && !errors.Is(err, ErrSyntax) {
				t.Fatalf("error does not wrap ErrSyntax: %v", err)
			}
		})
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("42 (bash) S 7 42 42 34816 42 4194304"))
	f.Add([]byte("42 (a) b) S 9 42"))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := ParseStat(data)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("error does not wrap ErrSyntax: %v", err)
			}
			return
		}
		if st.PPID < 0 {
			t.Fatalf("negative ppid %d", st.PPID)
		}
	})
}

func TestDescendants(t *testing.T) {
	cases := []struct {
		name string
		pids []int
		want []uint32
	}{
		{"subtree", []int{100}, []uint32{100, 101, 102}},
		{"leaf", []int{102}, []uint32{102}},
		{"whole tree", []int{1}, []uint32{1, 100, 101, 102, 200}},
		{"unknown pid", []int{999}, []uint32{999}},
		{"overlapping roots", []int{101, 100, 200}, []uint32{100, 101, 102, 200}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Descendants("testdata/proc", tc.pids...)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Descendants(%v) = %v, want %v", tc.pids, got, tc.want)
			}
		})
	}
}

func TestParseStatStartTime(t *testing.T) {
	line := "42 (a b) S 7 42 42 34816 42 4194304 1 2 3 4 5 6 7 8 20 0 1 0 123456 1000 10"
	st, err := ParseStat([]byte(line))
	if err != nil || st.State != 'S' || st.PPID != 7 || st.StartTime != 123456 {
		t.Fatalf("ParseStat = %+v, %v; want state S, ppid 7, start time 123456", st, err)
	}
}

func TestParseStatus(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		want    Status
		wantErr bool
	}{
		{"running", "Name:\tsh\nState:\tS (sleeping)\nTracerPid:\t0\n", Status{State: 'S'}, false},
		{"traced", "State:\tt (tracing stop)\nTracerPid:\t4242\n", Status{State: 't', TracerPid: 4242}, false},
		{"other signals pending", "State:\tR (running)\nTracerPid:\t0\nSigPnd:\t0000000000004002\nShdPnd:\t0000000000000000\n", Status{State: 'R'}, false},
		{"killed thread", "State:\tD (disk sleep)\nTracerPid:\t0\nSigPnd:\t0000000000000100\nShdPnd:\t0000000000000000\n", Status{State: 'D', Killed: true}, false},
		{"killed group", "State:\tR (running)\nTracerPid:\t0\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000102\n", Status{State: 'R', Killed: true}, false},
		{"bad mask", "State:\tR (running)\nTracerPid:\t0\nSigPnd:\tzz\n", Status{}, true},
		{"no tracer line", "State:\tR (running)\n", Status{}, true},
		{"bad tracer", "State:\tR (running)\nTracerPid:\tx\n", Status{}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseStatus([]byte(tc.in))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("got %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func FuzzParseStatus(f *testing.F) {
	f.Add([]byte("State:\tS (sleeping)\nTracerPid:\t0\n"))
	f.Add([]byte("State:\nTracerPid:\t-1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := ParseStatus(b); err != nil && !errors.Is(err, ErrSyntax) {
			t.Fatalf("error does not wrap ErrSyntax: %v", err)
		}
	})
}

func TestThisProcess(t *testing.T) {
	pid := os.Getpid()
	st, err := ReadStat("/proc", pid)
	if err != nil || st.PPID != os.Getppid() || st.StartTime == 0 {
		t.Fatalf("ReadStat(self) = %+v, %v; want ppid %d and a start time", st, err, os.Getppid())
	}
	if s, err := ReadStatus("/proc", pid); err != nil || s.Gone() || s.Stopped() {
		t.Fatalf("ReadStatus(self) = %v, %v", s, err)
	}
	if up, err := Uptime("/proc"); err != nil || up <= 0 {
		t.Fatalf("Uptime = %v, %v", up, err)
	}
	if args, err := Cmdline("/proc", pid); err != nil || len(args) == 0 || args[0] != os.Args[0] {
		t.Fatalf("Cmdline(self) = %q, %v; want %q first", args, err, os.Args[0])
	}
	if _, err := MountNS("/proc", pid); err != nil {
		t.Fatal(err)
	}
	if _, err := Comm(t.TempDir(), 1); !errors.Is(err, ErrNoProcess) {
		t.Fatalf("Comm of a pid absent from procfs: %v, want ErrNoProcess", err)
	}
}
