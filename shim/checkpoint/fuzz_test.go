package checkpoint

import (
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/criu"
)

// FuzzValidRef feeds ValidRef the three path segments of POST
// /checkpoint/{namespace}/{pod}/{container}, which end up in the archive's
// file name. Whatever it accepts must be a safe file name part, and must be
// accepted by criu's own check of the names too (otherwise an existing
// container would fail with 500 after being resolved).
func FuzzValidRef(f *testing.F) {
	for _, s := range [][3]string{
		{"default", "web-0", "app"}, {"kube-system", "coredns-7db6d8ff4d-x.y", "coredns"},
		{"..", "web", "app"}, {"a/b", "c", "d"}, {"", "", ""}, {"Default", "Web", "App"},
		{"ns", "pod.", "c"}, {"ns", "-pod", "c"}, {"ns", strings.Repeat("p", 254), "c"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, ns, pod, container string) {
		ref := criu.ContainerRef{Namespace: ns, Pod: pod, Container: container}
		if ValidRef(ref) != nil {
			return
		}
		for _, p := range []string{ns, pod, container} {
			if p == "" || p == "." || p == ".." || strings.ContainsAny(p, "/\x00_ ") || len(p) > 253 {
				t.Fatalf("ValidRef accepted %q in %v", p, ref)
			}
		}
		if err := (criu.Target{Pid: 1, Ref: ref}).Validate(); err != nil {
			t.Fatalf("ValidRef accepted %v, criu refuses it: %v", ref, err)
		}
		name := criu.ArchiveName(ref, criu.Target{}.Created, 0)
		if strings.Contains(name, "/") {
			t.Fatalf("archive name %q has a slash", name)
		}
	})
}
