package seccomp

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/nodeshim/nodeshim/testenv/testutil"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// cpuTime returns the process's user+system CPU time in nanoseconds. The
// benchmarks report it per operation beside the wall time: on a shared
// machine the wall time includes waiting for a CPU.
func cpuTime(b *testing.B) int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// loopCPU runs body b.N times (b.Loop) and reports CPU ns/op.
func loopCPU(b *testing.B, body func()) {
	b.ReportAllocs()
	start := cpuTime(b)
	n := 0
	for b.Loop() {
		body()
		n++
	}
	b.ReportMetric(float64(cpuTime(b)-start)/float64(n), "cpu-ns/op")
}

func benchData(b *testing.B) ([]byte, *Profile) {
	data, err := os.ReadFile("testdata/runtime-default.json")
	if err != nil {
		b.Fatal(err)
	}
	p, err := Parse(data, ParseOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return data, p
}

// BenchmarkParse parses the 355-name RuntimeDefault-like profile.
func BenchmarkParse(b *testing.B) {
	data, _ := benchData(b)
	loopCPU(b, func() {
		if _, err := Parse(data, ParseOptions{}); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkCompileCold parses and compiles the profile from its bytes, for
// the native architecture only and for the profile's three (x86_64, x86,
// x32), with both layouts, beside the same compiled as one libseccomp
// filter (one-filter: Compile before the stitched filters).
func BenchmarkCompileCold(b *testing.B) {
	data, _ := benchData(b)
	for _, tc := range []struct {
		name   string
		arches []string
		opt    Optimize
		one    bool
	}{
		{"native/linear", []string{}, OptimizeLinear, false},
		{"native/tree", []string{}, OptimizeTree, false},
		{"3arch/linear", nil, OptimizeLinear, false},
		{"3arch/tree", nil, OptimizeTree, false},
		// Baselines: one libseccomp filter of every architecture and
		// syscall, as Compile built it before the stitched filters.
		{"native/linear/one-filter", []string{}, OptimizeLinear, true},
		{"native/tree/one-filter", []string{}, OptimizeTree, true},
		{"3arch/linear/one-filter", nil, OptimizeLinear, true},
		{"3arch/tree/one-filter", nil, OptimizeTree, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			loopCPU(b, func() {
				q, err := Parse(data, ParseOptions{})
				if err != nil {
					b.Fatal(err)
				}
				if tc.arches != nil {
					q.Architectures = tc.arches
				}
				if _, err := Compile(q, CompileOptions{Optimize: tc.opt, oneFilter: tc.one}); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

// BenchmarkCompileOnly compiles the already parsed profile: libseccomp's
// share of a cold compile.
func BenchmarkCompileOnly(b *testing.B) {
	_, p := benchData(b)
	for _, tc := range []struct {
		name   string
		arches []string
		opt    Optimize
	}{
		{"native/linear", []string{}, OptimizeLinear},
		{"native/tree", []string{}, OptimizeTree},
	} {
		q := *p
		q.Architectures = tc.arches
		b.Run(tc.name, func(b *testing.B) {
			loopCPU(b, func() {
				if _, err := Compile(&q, CompileOptions{Optimize: tc.opt}); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

// lateAllowed returns the allowed syscall that the linear program checks
// last in its native-architecture section.
func lateAllowed(b *testing.B, f *Filter) int64 {
	prog := f.Program
	start := -1
	for i := f.StubInstructions; i < len(prog); i++ {
		if prog[i].Code == bpfJMP|bpfJEQ|bpfK && prog[i].K == unix.AUDIT_ARCH_X86_64 {
			start = i
			break
		}
	}
	last := int64(-1)
	for i := start + 1; start >= 0 && i < len(prog) && prog[i].Code&0x07 != bpfRET; i++ {
		in := prog[i]
		if in.Code != bpfJMP|bpfJEQ|bpfK || in.K >= x32SyscallBit {
			continue
		}
		if t := prog[i+1+int(in.Jt)]; t.Code == bpfRET|bpfK && t.K == retAllow {
			last = int64(in.K)
		}
	}
	if last < 0 {
		b.Fatal("no allowed syscall in the linear program's native section")
	}
	return last
}

// BenchmarkSyscallOverhead times syscalls in a child process with no
// filter, the linear filter and the binary tree, side by side: getpid, the
// allowed syscall the linear program checks last, personality(0xffffffff)
// (allowed by an argument check, so the kernel's action cache cannot skip
// the filter) and acct (denied by the default action). ns/syscall is the
// time per call measured inside the child.
func BenchmarkSyscallOverhead(b *testing.B) {
	testutil.RequireRoot(b)
	_, p := benchData(b)
	filters := map[string]*Filter{"none": nil}
	for _, opt := range []Optimize{OptimizeLinear, OptimizeTree} {
		for _, one := range []bool{false, true} {
			f, err := Compile(p, CompileOptions{Optimize: opt, oneFilter: one})
			if err != nil {
				b.Fatal(err)
			}
			name := opt.String()
			if one {
				name += "-one-filter"
			}
			filters[name] = f
		}
	}
	all := ^uint64(0)
	late := lateAllowed(b, filters["linear-one-filter"])
	name, _ := syscallNameNative(late)
	calls := []struct {
		name string
		nr   int64
		args [6]uint64
	}{
		{"getpid", unix.SYS_GETPID, [6]uint64{}},
		{"late-allowed-" + name, late, [6]uint64{all}},
		{"personality-arg-checked", unix.SYS_PERSONALITY, [6]uint64{0xffffffff}},
		{"acct-denied", unix.SYS_ACCT, [6]uint64{all}},
	}
	for _, c := range calls {
		for _, fname := range []string{"none", "linear", "tree", "linear-one-filter", "tree-one-filter"} {
			b.Run(c.name+"/"+fname, func(b *testing.B) {
				b.ReportAllocs()
				ns, err := timeSyscall(context.Background(), filters[fname], c.nr, c.args, b.N)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(ns)/float64(b.N), "ns/syscall")
			})
		}
	}
}

func syscallNameNative(nr int64) (string, error) {
	native, err := nativeArch()
	if err != nil {
		return "", err
	}
	return libseccomp.ScmpSyscall(nr).GetNameByArch(native)
}

// BenchmarkRepeatedNames parses and compiles a profile whose one rule
// repeats getpid n times, and reports the time per name: flat from 1k to
// 100k names when the work is linear (it grew with n² when every repeat
// reached libseccomp). CPU time, not wall time: the machine is shared.
func BenchmarkRepeatedNames(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			data := []byte(repeatedNames("getpid", n, "SCMP_ACT_ALLOW"))
			b.ReportAllocs()
			start, ops := cpuTime(b), 0
			for b.Loop() {
				p, err := Parse(data, ParseOptions{})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := Compile(p, CompileOptions{}); err != nil {
					b.Fatal(err)
				}
				ops++
			}
			b.ReportMetric(float64(cpuTime(b)-start)/float64(ops)/float64(n), "cpu-ns/name")
		})
	}
}

// BenchmarkComplainSyscall is complain mode's cost per syscall: getppid
// in a loop with no filter, under a filter that allows everything, and
// under the complain-mode form of a profile that denies getppid
// (SCMP_ACT_LOG for it, the kernel writing an audit record for every
// call while actions_logged lists "log", which it sets as serve does).
// The ns/syscall is measured inside the child, without its start.
func BenchmarkComplainSyscall(b *testing.B) {
	testutil.RequireRoot(b)
	if _, _, err := EnsureActionLogged("/proc", "log"); err != nil {
		b.Fatal(err)
	}
	compile := func(profile string, complain bool) *Filter {
		p, err := Parse([]byte(profile), ParseOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if complain {
			p = Complain(p)
		}
		f, err := Compile(p, CompileOptions{})
		if err != nil {
			b.Fatal(err)
		}
		return f
	}
	filters := []struct {
		name string
		f    *Filter
	}{
		{"none", nil},
		{"allow-all", compile(`{"defaultAction":"SCMP_ACT_ALLOW"}`, false)},
		{"complain-log", compile(`{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["getppid"],"action":"SCMP_ACT_ERRNO"}]}`, true)},
	}
	for _, tc := range filters {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			ns, err := timeSyscall(context.Background(), tc.f, unix.SYS_GETPPID, [6]uint64{}, b.N)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(ns)/float64(b.N), "ns/syscall")
		})
	}
}
