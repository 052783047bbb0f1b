package seccomp

import (
	"fmt"

	libseccomp "github.com/seccomp/libseccomp-golang"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

// SyscallNameByAuditArch names syscall nr of the architecture an audit
// record gives as arch= (an AUDIT_ARCH_ value, c000003e for x86_64).
func SyscallNameByAuditArch(auditArch uint32, nr int32) (string, error) {
	var a libseccomp.ScmpArch
	for sa, aa := range auditArches {
		if aa == auditArch {
			a = sa
		}
	}
	if a == 0 {
		return "", fmt.Errorf("audit arch %#x: %w", auditArch, errdefs.New(errdefs.ErrNotSupported, "unknown audit architecture"))
	}
	name, err := libseccomp.ScmpSyscall(nr).GetNameByArch(a)
	if err != nil {
		return "", fmt.Errorf("syscall %d on %s: %w", nr, a, err)
	}
	return name, nil
}
