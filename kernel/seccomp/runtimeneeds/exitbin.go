package runtimeneeds

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"runtime"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// exitBinary returns a static ELF executable for goarch whose whole program
// is exit_group(0): the container's process of the measurement, which
// makes no syscall of its own beyond its exit, so that nothing of it is
// mistaken for the runtime's.
func exitBinary(goarch string) ([]byte, error) {
	var (
		machine elf.Machine
		code    []byte
	)
	switch goarch {
	case "amd64":
		machine = elf.EM_X86_64
		code = []byte{
			0x31, 0xff, // xor %edi,%edi
			0xb8, 0xe7, 0x00, 0x00, 0x00, // mov $231 (exit_group),%eax
			0x0f, 0x05, // syscall
		}
	case "arm64":
		machine = elf.EM_AARCH64
		code = []byte{
			0x00, 0x00, 0x80, 0xd2, // mov x0, #0
			0xc8, 0x0b, 0x80, 0xd2, // mov x8, #94 (exit_group)
			0x01, 0x00, 0x00, 0xd4, // svc #0
		}
	default:
		return nil, errdefs.New(errdefs.ErrNotSupported, fmt.Sprintf("runtime needs: no exit binary for %s", goarch))
	}
	const (
		base    = 0x400000
		ehsize  = 64
		phsize  = 56
		codeOff = ehsize + phsize
	)
	size := uint64(codeOff + len(code))
	var b bytes.Buffer
	hdr := elf.Header64{
		Type:      uint16(elf.ET_EXEC),
		Machine:   uint16(machine),
		Version:   uint32(elf.EV_CURRENT),
		Entry:     base + codeOff,
		Phoff:     ehsize,
		Ehsize:    ehsize,
		Phentsize: phsize,
		Phnum:     1,
		Shentsize: 64,
	}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	hdr.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	hdr.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	prog := elf.Prog64{
		Type:   uint32(elf.PT_LOAD),
		Flags:  uint32(elf.PF_R | elf.PF_X),
		Vaddr:  base,
		Paddr:  base,
		Filesz: size,
		Memsz:  size,
		Align:  0x1000,
	}
	binary.Write(&b, binary.LittleEndian, hdr) // a bytes.Buffer does not fail
	binary.Write(&b, binary.LittleEndian, prog)
	b.Write(code)
	return b.Bytes(), nil
}

// nativeExitBinary is exitBinary for the architecture nodeshim runs on.
func nativeExitBinary() ([]byte, error) { return exitBinary(runtime.GOARCH) }
