package seccomp

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/testenv/golden"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

func mustParse(t testing.TB, s string) *Profile {
	t.Helper()
	p, err := Parse([]byte(s), ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCompileSummary(t *testing.T) {
	tests := []struct {
		name     string
		file     string
		opt      Optimize
		arches   string
		syscalls int
		enosys   bool
		skipped  []string
	}{
		{"deny-mkdir linear", "deny-mkdir.json", OptimizeLinear, "amd64", 2, false, nil},
		{"deny-mkdir auto", "deny-mkdir.json", OptimizeAuto, "amd64", 2, false, nil},
		{"runtime-default tree", "runtime-default.json", OptimizeTree, "amd64,x86,x32", 356, true, []string{
			`syscalls[0].names[211]: "recv" is not a syscall on [amd64 x86 x32]; skipped`,
			`syscalls[0].names[253]: "send" is not a syscall on [amd64 x86 x32]; skipped`,
			`syscalls[0].names[354]: "mseal" is unknown to libseccomp 2.5.4; skipped`,
		}},
		{"unknown names", "unknown-names.json", OptimizeTree, "amd64", 5, false, []string{
			`syscalls[0].names[3]: "no_such_syscall" is unknown to libseccomp 2.5.4; skipped`,
			`syscalls[0].names[5]: "arm_fadvise64_64" is not a syscall on [amd64]; skipped`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, f := loadTestdata(t, tc.file, CompileOptions{Optimize: tc.opt})
			if got := strings.Join(f.Arches, ","); got != tc.arches {
				t.Errorf("arches %s", got)
			}
			if f.Syscalls != tc.syscalls {
				t.Errorf("syscalls %d, want %d", f.Syscalls, tc.syscalls)
			}
			if tc.opt == OptimizeAuto && f.Optimize != OptimizeTree {
				t.Errorf("auto chose %s with libseccomp %s", f.Optimize, LibraryVersion())
			}
			if (len(f.ENOSYS) > 0) != tc.enosys || (f.StubInstructions > 0) != tc.enosys {
				t.Errorf("ENOSYS prefix %+v (%d instructions)", f.ENOSYS, f.StubInstructions)
			}
			var skipped []string
			for _, w := range f.Skipped {
				skipped = append(skipped, w.String())
			}
			if strings.Join(skipped, "\n") != strings.Join(tc.skipped, "\n") {
				t.Errorf("skipped:\n%s", strings.Join(skipped, "\n"))
			}
			if f.Instructions != len(f.Program) || f.Instructions == 0 {
				t.Errorf("instructions %d of %d", f.Instructions, len(f.Program))
			}
		})
	}
}

func TestDisassembleGolden(t *testing.T) {
	for _, opt := range []Optimize{OptimizeLinear, OptimizeTree} {
		t.Run(opt.String(), func(t *testing.T) {
			_, f := loadTestdata(t, "kill-process.json", CompileOptions{Optimize: opt})
			golden.Check(t, "kill-process."+opt.String()+".disasm", []byte(Disassemble(f.Program)))
		})
	}
	// The ENOSYS prefix for a deny-by-default profile on two arches.
	p := mustParse(t, `{"defaultAction":"SCMP_ACT_KILL_PROCESS","architectures":["SCMP_ARCH_X86"],"syscalls":[{"names":["read","exit_group"],"action":"SCMP_ACT_ALLOW"}]}`)
	f, err := Compile(p, CompileOptions{Optimize: OptimizeLinear})
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "enosys-prefix.disasm", []byte(Disassemble(f.Program)))
}

func TestProgramEncoding(t *testing.T) {
	_, f := loadTestdata(t, "runtime-default.json", CompileOptions{})
	b := EncodeProgram(f.Program)
	if len(b) != 8*len(f.Program) {
		t.Fatalf("%d bytes", len(b))
	}
	back, err := DecodeProgram(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range back {
		if back[i] != f.Program[i] {
			t.Fatalf("instruction %d: %+v != %+v", i, back[i], f.Program[i])
		}
	}
	if _, err := DecodeProgram(b[:13]); err == nil {
		t.Error("13 bytes decoded")
	}
}

func TestCompileErrors(t *testing.T) {
	// More rules than a classic BPF program can hold: 2100 values of one
	// argument of kill and of tkill, each its own rule (two comparisons of
	// one argument are ORed). Compile refuses them before libseccomp
	// builds anything.
	var conds []string
	for v := 0; v < 2100; v++ {
		conds = append(conds, `{"index":0,"value":`+strconv.Itoa(v*7)+`,"op":"SCMP_CMP_EQ"}`)
	}
	args := strings.Join(conds, ",")
	p := mustParse(t, `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["kill"],"action":"SCMP_ACT_ERRNO","args":[`+args+`]},{"names":["tkill"],"action":"SCMP_ACT_ERRNO","args":[`+args+`]}]}`)
	_, err := Compile(p, CompileOptions{Optimize: OptimizeLinear})
	if !errors.Is(err, ErrCompile) || !strings.Contains(err.Error(), "at least 4202 BPF instructions, the kernel accepts at most 4096") {
		t.Errorf("got %v", err)
	}
}

// TestENOSYSPrefix runs syscalls the profile does not name under a
// deny-by-default profile: in the table (EPERM, the default), above the
// highest named syscall (ENOSYS from the prefix) and unknown to the kernel.
func TestENOSYSPrefix(t *testing.T) {
	testutil.RequireRoot(t)
	// Names up to pidfd_open (434): clone3 (435) and faccessat2 (439) are
	// newer than this profile, acct (163) is older and not named.
	p := mustParse(t, `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["read","write","exit_group","getpid","pidfd_open"],"action":"SCMP_ACT_ALLOW"}]}`)
	all := ^uint64(0)
	minus1 := [6]uint64{all, all, all, all, all, all}
	tests := []struct {
		name     string
		nr       int64
		noENOSYS bool
		want     unix.Errno
	}{
		{"acct older, not named", unix.SYS_ACCT, false, unix.EPERM},
		{"clone3 newer", unix.SYS_CLONE3, false, unix.ENOSYS},
		{"faccessat2 newer", unix.SYS_FACCESSAT2, false, unix.ENOSYS},
		{"unknown to the kernel", 1000, false, unix.ENOSYS},
		{"pidfd_open named", unix.SYS_PIDFD_OPEN, false, unix.EINVAL},
		{"clone3 without prefix", unix.SYS_CLONE3, true, unix.EPERM},
		{"unknown without prefix", 1000, true, unix.EPERM},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Compile(p, CompileOptions{NoENOSYS: tc.noENOSYS})
			if err != nil {
				t.Fatal(err)
			}
			recs := []probeRecord{{Nr: tc.nr, Args: minus1}}
			if _, err := runProbes(context.Background(), f, recs); err != nil {
				t.Fatal(err)
			}
			if recs[0].State != 2 || unix.Errno(recs[0].Errno) != tc.want {
				t.Errorf("syscall %d: %s, want %v", tc.nr, observed(recs[0]), tc.want)
			}
		})
	}
	// x32 numbers share AUDIT_ARCH_X86_64 but are not the prefix's business:
	// without x32 in the filter libseccomp's program kills them.
	f, err := Compile(p, CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	recs := []probeRecord{{Nr: x32SyscallBit | unix.SYS_GETPID}}
	if _, err := runProbes(context.Background(), f, recs); err != nil {
		t.Fatal(err)
	}
	if recs[0].Signal != unix.SIGSYS {
		t.Errorf("x32 getpid: %s, want SIGSYS from the bad-arch action", observed(recs[0]))
	}
}
