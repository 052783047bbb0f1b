package seccomp

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// runBPF runs a seccomp program on data the way the kernel does (the
// instructions libseccomp and enosysStub emit) and returns its answer.
func runBPF(prog []Instruction, data []byte) (uint32, error) {
	var a uint32
	var mem [16]uint32
	for pc := 0; pc < len(prog); pc++ {
		ins := prog[pc]
		switch ins.Code {
		case bpfLD | bpfW | bpfABS:
			if int(ins.K)+4 > len(data) {
				return 0, fmt.Errorf("pc %d: load at %d", pc, ins.K)
			}
			a = binary.LittleEndian.Uint32(data[ins.K:])
		case bpfLD | bpfMEM:
			a = mem[ins.K]
		case bpfST:
			mem[ins.K] = a
		case bpfALU | 0x50 | bpfK: // BPF_AND
			a &= ins.K
		case bpfRET | bpfK:
			return ins.K, nil
		case bpfJMP | bpfJA:
			pc += int(ins.K)
		case bpfJMP | bpfJEQ | bpfK, bpfJMP | bpfJGT | bpfK, bpfJMP | bpfJGE | bpfK, bpfJMP | bpfJSET | bpfK:
			var t bool
			switch ins.Code &^ (bpfJMP | bpfK) {
			case bpfJEQ:
				t = a == ins.K
			case bpfJGT:
				t = a > ins.K
			case bpfJGE:
				t = a >= ins.K
			case bpfJSET:
				t = a&ins.K != 0
			}
			if t {
				pc += int(ins.Jt)
			} else {
				pc += int(ins.Jf)
			}
		default:
			return 0, fmt.Errorf("pc %d: instruction %#x not emulated", pc, ins.Code)
		}
	}
	return 0, fmt.Errorf("ran off the end of the program")
}

// seccompData encodes struct seccomp_data.
func seccompData(nr, arch uint32, args [6]uint64) []byte {
	b := make([]byte, 64)
	binary.LittleEndian.PutUint32(b[dataNr:], nr)
	binary.LittleEndian.PutUint32(b[dataArch:], arch)
	for i, v := range args {
		binary.LittleEndian.PutUint64(b[dataArgs+8*i:], v)
	}
	return b
}

// TestSplitFilterAnswersAsOneFilter compiles every test profile with its
// architectures in one libseccomp filter and split per architecture, and
// checks that both programs answer every call alike: every syscall number
// of x86_64, x32 and i386 (and beyond), from a foreign architecture, with
// the argument values the profile's conditions name and their neighbours.
func TestSplitFilterAnswersAsOneFilter(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		p, err := Parse(data, ParseOptions{})
		if err != nil {
			continue // the parser's own tests cover invalid profiles
		}
		for _, arches := range [][]string{nil, {"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"}, {"SCMP_ARCH_X86"}, {"SCMP_ARCH_X32"}} {
			q := *p
			if arches != nil {
				q.Architectures = arches
			}
			for _, opt := range []Optimize{OptimizeLinear, OptimizeTree} {
				name := fmt.Sprintf("%s/%v/%s", filepath.Base(path), q.Architectures, opt)
				t.Run(name, func(t *testing.T) {
					one, err := Compile(&q, CompileOptions{Optimize: opt, oneFilter: true})
					if err != nil {
						t.Fatal(err)
					}
					split, err := Compile(&q, CompileOptions{Optimize: opt})
					if err != nil {
						t.Fatal(err)
					}
					if one.Rules != split.Rules || one.Syscalls != split.Syscalls || len(one.Skipped) != len(split.Skipped) {
						t.Errorf("rules %d/%d, syscalls %d/%d, skipped %d/%d (one filter/split)", one.Rules, split.Rules, one.Syscalls, split.Syscalls, len(one.Skipped), len(split.Skipped))
					}
					compareAnswers(t, &q, one.Program, split.Program)
				})
			}
		}
	}
}

// compareAnswers runs both programs on the calls described in
// TestSplitFilterAnswersAsOneFilter.
func compareAnswers(t *testing.T, p *Profile, one, split []Instruction) {
	t.Helper()
	argSets := [][6]uint64{{}, {^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}}
	for call := uint64(1); call <= 24; call++ {
		// socketcall(2) and ipc(2) take the call number in the first argument.
		argSets = append(argSets, [6]uint64{call})
	}
	for _, s := range p.Syscalls {
		for _, c := range s.Args {
			if c.Index > 5 {
				continue
			}
			for _, v := range []uint64{c.Value, c.Value + 1, c.Value - 1, c.ValueTwo, c.Value | 1<<32, c.Value & 0xffffffff} {
				var args [6]uint64
				args[c.Index] = v
				argSets = append(argSets, args)
			}
		}
	}
	var nrs []uint32
	for nr := uint32(0); nr < 1100; nr++ {
		nrs = append(nrs, nr, x32SyscallBit|nr)
	}
	nrs = append(nrs, 0xffffffff, 0x3fffffff, 0x7fffffff, 0x80000000)
	mismatches := 0
	for _, arch := range []uint32{unix.AUDIT_ARCH_X86_64, unix.AUDIT_ARCH_I386, unix.AUDIT_ARCH_AARCH64} {
		for _, nr := range nrs {
			for _, args := range argSets {
				d := seccompData(nr, arch, args)
				a, errA := runBPF(one, d)
				b, errB := runBPF(split, d)
				if errA != nil || errB != nil {
					t.Fatalf("arch %#x nr %#x: %v / %v", arch, nr, errA, errB)
				}
				if a != b {
					if mismatches++; mismatches <= 10 {
						t.Errorf("arch %#x nr %#x args %#x: one filter %s, split %s", arch, nr, args, retString(a), retString(b))
					}
				}
			}
		}
	}
}
