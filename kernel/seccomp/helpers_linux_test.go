package seccomp

import (
	"testing"

	"github.com/nodeshim/nodeshim/kernel"
	"golang.org/x/sys/unix"
)

func runningKernel(t testing.TB) kernel.Version {
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
