package bpf

import (
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
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

// threadCPU returns the CPU time (user and system) of the calling thread.
func threadCPU(b *testing.B) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ts.Nano())
}

// BenchmarkRecorderOverheadInterleaved alternates rounds of the loop
// without and with the recorder attached (recording this process), so that
// load from other users of the machine falls on both alike. Each round is
// timed by the thread's CPU time (CLOCK_THREAD_CPUTIME_ID, on a locked OS
// thread), which time spent preempted by other processes does not inflate;
// it reports the median per-round ratio recorded/baseline as "ratio" and
// the same from wall-clock time as "wall-ratio".
//
// The "other-target" variant records another process (the parent), so
// that this loop pays what every task outside the target pays while a
// recording runs. The "hook-only" variant attaches an empty program (return 0) to the same
// raw tracepoint instead: the cost of the hook itself (the syscall slow path
// that an attached sys_enter tracepoint turns on for every task), which no
// recorder on this tracepoint can avoid.
func BenchmarkRecorderOverheadInterleaved(b *testing.B) {
	requireBPF(b)
	loops := syscallLoops(b)
	attachRecorder := func(b *testing.B) func() {
		r, err := NewRecorder(ProcessTreeTarget(uint32(os.Getpid())))
		if err != nil {
			b.Fatal(err)
		}
		return func() { r.Close() }
	}
	// other-target: the recorder recording a process that is not this
	// one (its parent): what every other task of the host pays meanwhile.
	attachOther := func(b *testing.B) func() {
		r, err := NewRecorder(ProcessTreeTarget(uint32(os.Getppid())))
		if err != nil {
			b.Fatal(err)
		}
		return func() { r.Close() }
	}
	attachEmpty := func(b *testing.B) func() {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Type:         ebpf.RawTracepoint,
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
			License:      "GPL",
		})
		if err != nil {
			b.Fatal(err)
		}
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sys_enter", Program: prog})
		if err != nil {
			prog.Close()
			b.Fatal(err)
		}
		return func() { l.Close(); prog.Close() }
	}
	for _, v := range []struct {
		name   string
		attach func(*testing.B) func()
	}{
		{"getppid/recorder", attachRecorder}, {"getppid/other-target", attachOther}, {"getppid/hook-only", attachEmpty},
		{"read4k/recorder", attachRecorder}, {"read4k/other-target", attachOther}, {"read4k/hook-only", attachEmpty},
	} {
		loop := loops[strings.Split(v.name, "/")[0]]
		b.Run(v.name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			const perRound = 50000
			round := func() (cpu, wall time.Duration) {
				c0, w0 := threadCPU(b), time.Now()
				for range perRound {
					loop()
				}
				return threadCPU(b) - c0, time.Since(w0)
			}
			var ratios, wallRatios []float64
			var base, rec time.Duration
			for r := 0; r < max(b.N/perRound, 11); r++ {
				cb, wb := round()
				detach := v.attach(b)
				cr, wr := round()
				detach()
				base += cb
				rec += cr
				ratios = append(ratios, float64(cr)/float64(cb))
				wallRatios = append(wallRatios, float64(wr)/float64(wb))
			}
			slices.Sort(ratios)
			slices.Sort(wallRatios)
			n := float64(len(ratios) * perRound)
			b.ReportMetric(ratios[len(ratios)/2], "ratio")
			b.ReportMetric(wallRatios[len(wallRatios)/2], "wall-ratio")
			b.ReportMetric(float64(base.Nanoseconds())/n, "base-cpu-ns/call")
			b.ReportMetric(float64(rec.Nanoseconds())/n, "recorded-cpu-ns/call")
		})
	}
}
