package fleet

import (
	"os"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     time.Duration
		err      bool
	}{
		{"plain", "1234 (etcd) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 100 0 0", 3 * time.Second, false},
		{"name with spaces and parens", "77 (a) b (c)) R 1 77 77 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 1 0 0", 100 * time.Millisecond, false},
		{"truncated", "77 (x) R 1 2 3", 0, true},
		{"no name", "77 x R", 0, true},
		{"not a number", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 ten 0 0", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseStatCPU([]byte(tc.in))
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("ParseStatCPU(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
			}
		})
	}
}

func TestParseStatusRSS(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     int64
		err      bool
	}{
		{"kB", "Name:\tetcd\nVmHWM:\t  9000 kB\nVmRSS:\t    2048 kB\nThreads:\t12\n", 2 << 20, false},
		{"missing", "Name:\tkthreadd\nThreads:\t1\n", 0, true},
		{"odd unit", "VmRSS:\t 12 MB\n", 0, true},
		{"negative", "VmRSS:\t -1 kB\n", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseStatusRSS([]byte(tc.in))
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("ParseStatusRSS(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
			}
		})
	}
}

// TestReadProcSelf reads this test's own process: CPU time is spent, and
// the resident set is the one the kernel reports in /proc/self/statm.
func TestReadProcSelf(t *testing.T) {
	u, err := ReadProc("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if u.RSS <= 0 {
		t.Errorf("RSS %d, want > 0", u.RSS)
	}
	if u.CPU < 0 {
		t.Errorf("CPU %v, want >= 0", u.CPU)
	}
}

func FuzzParseStatCPU(f *testing.F) {
	f.Add([]byte("1234 (etcd) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 100 0 0"))
	f.Add([]byte("1 ((x)) S"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if d, err := ParseStatCPU(b); err == nil && d < 0 {
			t.Errorf("negative CPU time %v", d)
		}
	})
}

func FuzzParseStatusRSS(f *testing.F) {
	f.Add([]byte("VmRSS:\t    2048 kB\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if n, err := ParseStatusRSS(b); err == nil && n < 0 {
			t.Errorf("negative RSS %d", n)
		}
	})
}
