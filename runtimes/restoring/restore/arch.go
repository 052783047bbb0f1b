package restore

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// ErrImage: a CRIU image of the archive does not parse.
var ErrImage = errdefs.New(errdefs.ErrInvalidArgument, "invalid CRIU image")

// CRIU's image magics (criu/include/magic.h): a set magic, then the
// image's own.
const (
	imgCommonMagic  = 0x54564319
	imgServiceMagic = 0x55105940
	coreMagic       = 0x55053847
)

// Arch is CRIU's core_entry.march (images/core.proto): the machine a
// task was dumped on.
type Arch int32

// CRIU's machine types.
const (
	ArchUnknown     Arch = 0
	ArchX86_64      Arch = 1
	ArchARM         Arch = 2
	ArchAARCH64     Arch = 3
	ArchPPC64       Arch = 4
	ArchS390        Arch = 5
	ArchMIPS        Arch = 6
	ArchRISCV64     Arch = 7
	ArchLoongArch64 Arch = 8
)

var archNames = map[Arch]string{
	ArchX86_64: "x86_64", ArchARM: "arm", ArchAARCH64: "aarch64", ArchPPC64: "ppc64",
	ArchS390: "s390", ArchMIPS: "mips", ArchRISCV64: "riscv64", ArchLoongArch64: "loongarch64",
}

func (a Arch) String() string {
	if n, ok := archNames[a]; ok {
		return n
	}
	return fmt.Sprintf("unknown machine %d", int32(a))
}

// ArchOfGOARCH is the CRIU machine type of a Go GOARCH; ArchUnknown for
// one CRIU does not run on.
func ArchOfGOARCH(goarch string) Arch {
	switch goarch {
	case "amd64":
		return ArchX86_64
	case "arm":
		return ArchARM
	case "arm64":
		return ArchAARCH64
	case "ppc64le":
		return ArchPPC64
	case "s390x":
		return ArchS390
	case "mips64le":
		return ArchMIPS
	case "riscv64":
		return ArchRISCV64
	case "loong64":
		return ArchLoongArch64
	}
	return ArchUnknown
}

// CoreArch reads the machine type from a CRIU core image (core-PID.img):
// the magics, then the first entry (a little-endian uint32 size and a
// core_entry), whose field 1 is mtype.
func CoreArch(b []byte) (Arch, error) {
	if len(b) < 4 {
		return 0, fmt.Errorf("%w: core image of %d bytes", ErrImage, len(b))
	}
	m := binary.LittleEndian.Uint32(b)
	if m == imgCommonMagic || m == imgServiceMagic {
		b = b[4:]
		if len(b) < 4 {
			return 0, fmt.Errorf("%w: core image ends after its set magic", ErrImage)
		}
		m = binary.LittleEndian.Uint32(b)
	}
	if m != coreMagic {
		return 0, fmt.Errorf("%w: magic %#x is not a core image's", ErrImage, m)
	}
	b = b[4:]
	if len(b) < 4 {
		return 0, fmt.Errorf("%w: core image has no entry", ErrImage)
	}
	n := binary.LittleEndian.Uint32(b)
	b = b[4:]
	if uint64(n) > uint64(len(b)) {
		return 0, fmt.Errorf("%w: core entry of %d bytes in %d", ErrImage, n, len(b))
	}
	b = b[:n]
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return 0, fmt.Errorf("%w: core entry: %w", ErrImage, protowire.ParseError(l))
		}
		b = b[l:]
		if num == 1 && typ == protowire.VarintType {
			v, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return 0, fmt.Errorf("%w: core entry mtype: %w", ErrImage, protowire.ParseError(l))
			}
			return Arch(int32(v)), nil
		}
		l = protowire.ConsumeFieldValue(num, typ, b)
		if l < 0 {
			return 0, fmt.Errorf("%w: core entry field %d: %w", ErrImage, num, protowire.ParseError(l))
		}
		b = b[l:]
	}
	return 0, fmt.Errorf("%w: core entry has no mtype", ErrImage)
}
