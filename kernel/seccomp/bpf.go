package seccomp

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// Instruction is one classic BPF instruction (struct sock_filter).
type Instruction struct {
	Code uint16
	Jt   uint8
	Jf   uint8
	K    uint32
}

// instructionSize is sizeof(struct sock_filter).
const instructionSize = 8

// Classic BPF opcodes used by seccomp filters (include/uapi/linux/bpf_common.h).
const (
	bpfLD   = 0x00
	bpfLDX  = 0x01
	bpfST   = 0x02
	bpfSTX  = 0x03
	bpfALU  = 0x04
	bpfJMP  = 0x05
	bpfRET  = 0x06
	bpfMISC = 0x07

	bpfW   = 0x00
	bpfABS = 0x20
	bpfIMM = 0x00
	bpfMEM = 0x60
	bpfK   = 0x00
	bpfX   = 0x08
	bpfA   = 0x10

	bpfJA   = 0x00
	bpfJEQ  = 0x10
	bpfJGT  = 0x20
	bpfJGE  = 0x30
	bpfJSET = 0x40
)

// Return values of a seccomp filter (include/uapi/linux/seccomp.h).
const (
	retKillProcess = 0x80000000
	retKillThread  = 0x00000000
	retTrap        = 0x00030000
	retErrno       = 0x00050000
	retUserNotif   = 0x7fc00000
	retTrace       = 0x7ff00000
	retLog         = 0x7ffc0000
	retAllow       = 0x7fff0000
	retActionFull  = 0xffff0000
	retData        = 0x0000ffff
)

// Offsets in struct seccomp_data.
const (
	dataNr   = 0
	dataArch = 4
	dataArgs = 16
)

// maxInstructions is BPF_MAXINSNS: the kernel refuses longer programs.
const maxInstructions = 4096

// EncodeProgram returns the program in the kernel's in-memory layout (host
// byte order), the format `nodeshim seccomp compile -o` writes.
func EncodeProgram(prog []Instruction) []byte {
	b := make([]byte, len(prog)*instructionSize)
	for i, in := range prog {
		o := b[i*instructionSize:]
		binary.NativeEndian.PutUint16(o[0:], in.Code)
		o[2] = in.Jt
		o[3] = in.Jf
		binary.NativeEndian.PutUint32(o[4:], in.K)
	}
	return b
}

// DecodeProgram reads a program written by EncodeProgram or by libseccomp's
// seccomp_export_bpf.
func DecodeProgram(b []byte) ([]Instruction, error) {
	if len(b)%instructionSize != 0 {
		return nil, fmt.Errorf("BPF program of %d bytes is not a multiple of %d", len(b), instructionSize)
	}
	prog := make([]Instruction, len(b)/instructionSize)
	for i := range prog {
		o := b[i*instructionSize:]
		prog[i] = Instruction{
			Code: binary.NativeEndian.Uint16(o[0:]),
			Jt:   o[2],
			Jf:   o[3],
			K:    binary.NativeEndian.Uint32(o[4:]),
		}
	}
	return prog, nil
}

// retString names a filter return value: ALLOW, ERRNO(1), KILL_PROCESS...
func retString(k uint32) string {
	data := k & retData
	switch k & retActionFull {
	case retKillProcess:
		return "KILL_PROCESS"
	case retKillThread:
		return "KILL_THREAD"
	case retTrap:
		return fmt.Sprintf("TRAP(%d)", data)
	case retErrno:
		return fmt.Sprintf("ERRNO(%d)", data)
	case retUserNotif:
		return "NOTIFY"
	case retTrace:
		return fmt.Sprintf("TRACE(%d)", data)
	case retLog:
		return "LOG"
	case retAllow:
		return "ALLOW"
	}
	return fmt.Sprintf("%#x", k)
}

func dataField(off uint32) string {
	switch {
	case off == dataNr:
		return "nr"
	case off == dataArch:
		return "arch"
	case off == 8:
		return "ip.lo"
	case off == 12:
		return "ip.hi"
	case off >= dataArgs && off < dataArgs+48:
		half := "lo"
		if (off-dataArgs)%8 == 4 {
			half = "hi"
		}
		return fmt.Sprintf("args[%d].%s", (off-dataArgs)/8, half)
	}
	return fmt.Sprintf("data[%d]", off)
}

// Disassemble renders a seccomp program one instruction a line, with the
// seccomp_data field names and the actions spelled out.
func Disassemble(prog []Instruction) string {
	var b strings.Builder
	alu := map[uint16]string{0x00: "add", 0x10: "sub", 0x20: "mul", 0x30: "div", 0x40: "or", 0x50: "and", 0x60: "lsh", 0x70: "rsh", 0x80: "neg", 0x90: "mod", 0xa0: "xor"}
	jmp := map[uint16]string{bpfJEQ: "jeq", bpfJGT: "jgt", bpfJGE: "jge", bpfJSET: "jset"}
	for pc, in := range prog {
		var text string
		switch in.Code & 0x07 {
		case bpfLD:
			switch in.Code & 0xe0 {
			case bpfABS:
				text = "ld   $" + dataField(in.K)
			case bpfMEM:
				text = fmt.Sprintf("ld   M[%d]", in.K)
			case bpfIMM:
				text = fmt.Sprintf("ld   #%#x", in.K)
			}
		case bpfLDX:
			switch in.Code & 0xe0 {
			case bpfMEM:
				text = fmt.Sprintf("ldx  M[%d]", in.K)
			case bpfIMM:
				text = fmt.Sprintf("ldx  #%#x", in.K)
			}
		case bpfST:
			text = fmt.Sprintf("st   M[%d]", in.K)
		case bpfSTX:
			text = fmt.Sprintf("stx  M[%d]", in.K)
		case bpfALU:
			src := fmt.Sprintf("#%#x", in.K)
			if in.Code&bpfX != 0 {
				src = "x"
			}
			text = fmt.Sprintf("%-4s %s", alu[in.Code&0xf0], src)
		case bpfJMP:
			op := in.Code & 0xf0
			if op == bpfJA {
				text = fmt.Sprintf("ja   %04d", pc+1+int(in.K))
				break
			}
			src := fmt.Sprintf("#%#x", in.K)
			if in.Code&bpfX != 0 {
				src = "x"
			}
			text = fmt.Sprintf("%-4s %-12s true:%04d false:%04d", jmp[op], src, pc+1+int(in.Jt), pc+1+int(in.Jf))
		case bpfRET:
			if in.Code&0x18 == bpfA {
				text = "ret  A"
			} else {
				text = "ret  " + retString(in.K)
			}
		case bpfMISC:
			if in.Code&0xf8 == 0x80 {
				text = "txa"
			} else {
				text = "tax"
			}
		}
		if text == "" {
			text = fmt.Sprintf("code=%#04x jt=%d jf=%d k=%#x", in.Code, in.Jt, in.Jf, in.K)
		}
		fmt.Fprintf(&b, "%04d: %s\n", pc, text)
	}
	return b.String()
}

// stubArch is one architecture of the ENOSYS prefix.
type stubArch struct {
	Name      string `json:"arch"`
	AuditArch uint32 `json:"auditArch"`
	// MaxNr is the highest syscall number the profile names on this arch.
	MaxNr uint32 `json:"maxNr"`
	// X32Bit is set on x86_64, where numbers with bit 30 set are the x32
	// ABI sharing AUDIT_ARCH_X86_64; they are left to libseccomp's program.
	X32Bit bool `json:"-"`
}

// x32SyscallBit is __X32_SYSCALL_BIT.
const x32SyscallBit = 0x40000000

// enosysStub builds the prefix that answers ENOSYS for syscall numbers above
// the highest one the profile names, and falls through to libseccomp's
// program for everything else. Its jumps all stay inside the stub, so the
// program after it is unchanged.
func enosysStub(arches []stubArch) []Instruction {
	n := len(arches)
	if n == 0 {
		return nil
	}
	// Layout: ld arch; one jeq per arch; ja main; one block per arch;
	// ret ENOSYS; main.
	blockLen := func(a stubArch) int {
		if a.X32Bit {
			return 3
		}
		return 2
	}
	blockStart := make([]int, n)
	pos := 1 + n + 1
	for i, a := range arches {
		blockStart[i] = pos
		pos += blockLen(a)
	}
	enosys := pos
	main := enosys + 1
	prog := []Instruction{{Code: bpfLD | bpfW | bpfABS, K: dataArch}}
	for i, a := range arches {
		pc := len(prog)
		prog = append(prog, Instruction{Code: bpfJMP | bpfJEQ | bpfK, Jt: uint8(blockStart[i] - pc - 1), K: a.AuditArch})
	}
	prog = append(prog, Instruction{Code: bpfJMP | bpfJA, K: uint32(main - len(prog) - 1)})
	for _, a := range arches {
		prog = append(prog, Instruction{Code: bpfLD | bpfW | bpfABS, K: dataNr})
		if a.X32Bit {
			pc := len(prog)
			prog = append(prog, Instruction{Code: bpfJMP | bpfJGE | bpfK, Jt: uint8(main - pc - 1), K: x32SyscallBit})
		}
		pc := len(prog)
		prog = append(prog, Instruction{Code: bpfJMP | bpfJGT | bpfK, Jt: uint8(enosys - pc - 1), Jf: uint8(main - pc - 1), K: a.MaxNr})
	}
	prog = append(prog, Instruction{Code: bpfRET | bpfK, K: retErrno | enosysErrno})
	return prog
}

// enosysErrno is ENOSYS on every Linux architecture nodeshim builds for.
const enosysErrno = 38
