package podman

import (
	"reflect"
	"testing"

	"github.com/nodeshim/nodeshim/criu"
)

// TestExtMountsFor: a masked file's /dev/null bind mount is named as the
// restoring runtime maps it (runc: "/dev/null"; crun: the masked path),
// and no other external mount changes.
func TestExtMountsFor(t *testing.T) {
	dump := []criu.ExtMount{
		{Key: "/etc/hosts", Val: "/etc/hosts"},
		{Key: "/proc/kcore", Val: "/dev/null"},
		{Key: "/proc/timer_list", Val: "/dev/null"},
		{Key: "/dev/null", Val: "/dev/null"},
	}
	crun := []criu.ExtMount{
		{Key: "/etc/hosts", Val: "/etc/hosts"},
		{Key: "/proc/kcore", Val: "/proc/kcore"},
		{Key: "/proc/timer_list", Val: "/proc/timer_list"},
		{Key: "/dev/null", Val: "/dev/null"},
	}
	for _, tc := range []struct {
		name, runtime string
		want          []criu.ExtMount
	}{
		{"runc", "runc", dump},
		{"runc by path", "/usr/local/bin/runc", dump},
		{"crun", "crun", crun},
		{"crun by path", "/usr/bin/crun", crun},
		{"unknown runtime keeps runc's names", "", dump},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]criu.ExtMount(nil), dump...)
			got := extMountsFor(tc.runtime, in)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("extMountsFor(%q) = %v, want %v", tc.runtime, got, tc.want)
			}
			if !reflect.DeepEqual(in, dump) {
				t.Errorf("extMountsFor(%q) changed its input: %v", tc.runtime, in)
			}
		})
	}
}
