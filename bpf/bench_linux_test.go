package bpf

import (
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// syscallLoops are the syscall-heavy loops of the overhead benchmark: the
// cheapest syscall there is (the worst case for a per-syscall hook), and a
// 4 KiB read, closer to what a workload does.
func syscallLoops(b *testing.B) map[string]func() {
	b.Helper()
	zero, err := os.Open("/dev/zero")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { zero.Close() })
	buf := make([]byte, 4096)
	fd := int(zero.Fd())
	return map[string]func(){
		"getppid": func() { syscall.RawSyscall(unix.SYS_GETPPID, 0, 0, 0) },
		"read4k": func() {
			if _, err := unix.Read(fd, buf); err != nil {
				b.Fatal(err)
			}
		},
	}
}

// BenchmarkRecorderOverhead runs each loop without the recorder, with the
// recorder attached and recording this process, and with the recorder
// attached but recording another target (what every other process of the
// host pays while a recording runs), side by side in one binary.
func BenchmarkRecorderOverhead(b *testing.B) {
	requireBPF(b)
	for _, name := range []string{"getppid", "read4k"} {
		loop := syscallLoops(b)[name]
		for _, mode := range []struct {
			name   string
			target *Target
		}{
			{"baseline", nil},
			{"recorded", &Target{Kind: TargetProcessTree, Keys: []uint64{uint64(os.Getpid())}}},
			{"other-target", &Target{Kind: TargetProcessTree, Keys: []uint64{1 << 30}}},
		} {
			b.Run(name+"/"+mode.name, func(b *testing.B) {
				if mode.target != nil {
					rec, err := NewRecorder(*mode.target)
					if err != nil {
						b.Fatal(err)
					}
					defer rec.Close()
				}
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					loop()
				}
			})
		}
	}
}

// BenchmarkRecorderStartup measures NewRecorder: parsing the embedded
// object and the kernel's BTF, CO-RE relocation, verification and
// attachment, for the cgroup mode (one program, what `record -- CMD` uses)
// and the process-tree mode (three). Close is outside the timer: detaching
// a tracepoint waits for RCU grace periods.
func BenchmarkRecorderStartup(b *testing.B) {
	requireBPF(b)
	for _, target := range []Target{CgroupTarget(1, 0), ProcessTreeTarget(uint32(os.Getpid()))} {
		b.Run(target.Kind.String(), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				rec, err := NewRecorder(target)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := rec.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// BenchmarkRecorderOverheadInterleaved alternates rounds of the loop
// without and with the recorder attached (recording this process), so that
// load from other users of the machine falls on both alike, and reports
// the median per-round ratio recorded/baseline as "ratio".
func BenchmarkRecorderOverheadInterleaved(b *testing.B) {
	requireBPF(b)
	loops := syscallLoops(b)
	for _, name := range []string{"getppid", "read4k"} {
		loop := loops[name]
		b.Run(name, func(b *testing.B) {
			const perRound = 50000
			var ratios []float64
			var base, rec time.Duration
			for r := 0; r < max(b.N/perRound, 11); r++ {
				start := time.Now()
				for range perRound {
					loop()
				}
				tb := time.Since(start)
				recorder, err := NewRecorder(ProcessTreeTarget(uint32(os.Getpid())))
				if err != nil {
					b.Fatal(err)
				}
				start = time.Now()
				for range perRound {
					loop()
				}
				tr := time.Since(start)
				if err := recorder.Close(); err != nil {
					b.Fatal(err)
				}
				base += tb
				rec += tr
				ratios = append(ratios, float64(tr)/float64(tb))
			}
			slices.Sort(ratios)
			n := float64(len(ratios) * perRound)
			b.ReportMetric(ratios[len(ratios)/2], "ratio")
			b.ReportMetric(float64(base.Nanoseconds())/n, "base-ns/call")
			b.ReportMetric(float64(rec.Nanoseconds())/n, "recorded-ns/call")
		})
	}
}

// BenchmarkOOMWatcherStartup attaches and closes the OOM watcher with the
// default hook choice (including the failed attempts before the hook that
// works on this kernel).
func BenchmarkOOMWatcherStartup(b *testing.B) {
	requireBPF(b)
	b.ReportAllocs()
	for range b.N {
		w, err := WatchOOM(OOMOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
