package seccomp

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/kernel/capability"
)

func runningKernel(t testing.TB) capability.Version {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	v, err := ParseRelease(unix.ByteSliceToString(u.Release[:]))
	if err != nil {
		t.Fatal(err)
	}
	return v
}
