package archive

import (
	"archive/tar"
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/criu/archive/archivetest"
	"github.com/nodeshim/nodeshim/internal/errdefs"
)

func TestCheckImageRef(t *testing.T) {
	for _, tc := range []struct {
		ref string
		ok  bool
	}{
		{"busybox", true},
		{"docker.io/library/busybox:latest", true},
		{"localhost/app:1", true},
		{"localhost:5000/a/b-c__d.e:v1.2-rc", true},
		{"[::1]:5000/app@sha256:" + strings.Repeat("ab", 32), true},
		{"registry.k8s.io/pause:3.10@sha256:" + strings.Repeat("0", 64), true},
		{"sha256:" + strings.Repeat("0f", 32), true}, // containerd's image id
		{strings.Repeat("d1", 32), true},             // podman's image id
		{"", false},
		{"--address=/run/evil.sock", false},
		{"-busybox", false},
		{"Busybox", false},
		{"busybox:", false},
		{"busybox latest", false},
		{"busybox\n--help", false},
		{"a/../b", false},
		{"/abs/path", false},
		{"busybox@sha256:short", false},
		{strings.Repeat("a", 256), false},
	} {
		t.Run(tc.ref, func(t *testing.T) {
			err := CheckImageRef("config.dump", "rootfsImageRef", tc.ref)
			if (err == nil) != tc.ok {
				t.Fatalf("CheckImageRef(%q) = %v, want ok %v", tc.ref, err, tc.ok)
			}
			if err != nil && (!errors.Is(err, ErrInvalid) || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "rootfsImageRef")) {
				t.Fatalf("error %v: not ErrInvalid naming the field", err)
			}
		})
	}
}

func TestCheckName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"counter", true}, {"eloquent_turing", true}, {"pid-42", true}, {"Web_0.x", true},
		{strings.Repeat("f", 64), true}, {strings.Repeat("a", 253), true},
		{"", false}, {"-x", false}, {"--root=/", false}, {"../x", false}, {"a/b", false}, {".hidden", false},
		{"a b", false}, {"caf\u00e9", false}, {strings.Repeat("a", 254), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := CheckName("config.dump", "name", tc.name); (err == nil) != tc.ok {
				t.Fatalf("CheckName(%q) = %v, want ok %v", tc.name, err, tc.ok)
			}
		})
	}
}

func TestCheckAnnotations(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ann     map[string]string
		wantErr string
	}{
		{"CRI annotations", map[string]string{AnnotationCRIContainerType: "container", AnnotationSandboxName: "web-0", "org.systemd.property.After": "x"}, ""},
		{"CDI devices", map[string]string{CDIAnnotationPrefix + "gpu": "nvidia.com/gpu=0,nvidia.com/gpu=all,vendor.example/class=a:b"}, ""},
		{"no annotations", nil, ""},
		{"key with a space", map[string]string{"bad key": "x"}, `annotation key "bad key"`},
		{"key that is a flag", map[string]string{"--privileged": "x"}, `annotation key "--privileged"`},
		{"CDI device path", map[string]string{CDIAnnotationPrefix + "x": "../../dev/sda"}, "cdi.k8s.io/x"},
		{"CDI device without class", map[string]string{CDIAnnotationPrefix + "x": "nvidia.com=gpu"}, "not a qualified CDI device name"},
		{"CDI device list with an empty name", map[string]string{CDIAnnotationPrefix + "x": "nvidia.com/gpu=0,"}, "not a qualified CDI device name"},
		{"CDI device starting with '-'", map[string]string{CDIAnnotationPrefix + "x": "-v/c=d"}, "not a qualified CDI device name"},
		{"too large", map[string]string{"a": strings.Repeat("x", 256<<10)}, "more than 262144"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckAnnotations("spec.dump", tc.ann)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "spec.dump") {
				t.Fatalf("%v, want ErrInvalid naming spec.dump with %q", err, tc.wantErr)
			}
		})
	}
}

// TestReadMetaRefusesHostileValues: values of config.dump, spec.dump and
// status.dump that a restore passes on as arguments, names, paths or
// annotations are checked where the archive is read, so that no consumer
// gets one unchecked: an image reference that is a flag of ctr, a name
// that is a path, a CDI annotation that names no device.
func TestReadMetaRefusesHostileValues(t *testing.T) {
	const spec = `{"annotations":{"io.kubernetes.cri.container-type":"container"}}`
	for _, tc := range []struct {
		name, config, spec, status string
		wantErr                    string
	}{
		{name: "containerd's own", config: `{"id":"` + strings.Repeat("ab", 32) + `","name":"counter","runtime":"io.containerd.runc.v2",` +
			`"rootfsImageName":"docker.io/library/busybox:latest","rootfsImageRef":"sha256:` + strings.Repeat("0f", 32) + `"}`,
			status: `{"id":"abc","metadata":{"name":"counter"},"image":{"image":"docker.io/library/busybox:latest"},"image_ref":"sha256:` + strings.Repeat("0f", 32) + `",` +
				`"labels":{"io.kubernetes.pod.name":"web-0"},"annotations":{"cdi.k8s.io/gpu":"nvidia.com/gpu=0"}}`},
		{name: "image reference that is a flag", config: `{"name":"c","rootfsImageRef":"--address=/run/evil.sock"}`, wantErr: "rootfsImageRef"},
		{name: "image name that is a flag", config: `{"name":"c","rootfsImageName":"-h"}`, wantErr: "rootfsImageName"},
		{name: "container name that is a path", config: `{"name":"../../../etc/cron.d/x"}`, wantErr: `name "../../../etc/cron.d/x"`},
		{name: "container name that is a flag", config: `{"name":"--root=/tmp"}`, wantErr: "name"},
		{name: "pod with a slash", config: `{"name":"c","pod":"a/b"}`, wantErr: "pod"},
		{name: "id with a newline", config: `{"id":"a\nb","name":"c"}`, wantErr: "id"},
		{name: "runtime that is a flag", config: `{"name":"c","runtime":"--debug"}`, wantErr: "runtime"},
		{name: "runtime path that climbs", config: `{"name":"c","runtime":"/usr/../../tmp/x"}`, wantErr: "runtime"},
		{name: "spec annotation key", config: `{"name":"c"}`, spec: `{"annotations":{"a b":"c"}}`, wantErr: "spec.dump"},
		{name: "spec CDI annotation", config: `{"name":"c"}`, spec: `{"annotations":{"cdi.k8s.io/x":"/dev/sda"}}`, wantErr: "cdi.k8s.io/x"},
		{name: "status image reference that is a flag", config: `{"name":"c"}`, status: `{"image_ref":"--address=/x"}`, wantErr: "image_ref"},
		{name: "status name that is a path", config: `{"name":"c"}`, status: `{"metadata":{"name":"../x"}}`, wantErr: "metadata.name"},
		{name: "status CDI annotation", config: `{"name":"c"}`, status: `{"annotations":{"cdi.k8s.io/x":"a=b"}}`, wantErr: "cdi.k8s.io/x"},
		{name: "status that is not JSON", config: `{"name":"c"}`, status: `{`, wantErr: "status.dump"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := tc.spec
			if sp == "" {
				sp = spec
			}
			ms := archivetest.Minimal(tc.config, sp)
			if tc.status != "" {
				ms = append(ms, archivetest.Member{Name: StatusDump, Type: tar.TypeReg, Body: tc.status})
			}
			m, err := ReadMeta(bytes.NewReader(archivetest.Tar(t, ms)))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if m.Engine != EngineContainerd || m.Status == nil || m.Status.Metadata.Name != "counter" {
					t.Fatalf("meta %+v", m)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("%v, want ErrInvalid with %q", err, tc.wantErr)
			}
		})
	}
}

// FuzzCheckImageRef: whatever the input, an accepted reference is one no
// command line can read as a flag or a second argument, and no path can
// read as leaving its directory.
func FuzzCheckImageRef(f *testing.F) {
	for _, s := range []string{"busybox", "localhost:5000/a/b:1", "--address=x", "sha256:" + strings.Repeat("0", 64), "a/../b", "a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if CheckImageRef("f", "ref", s) != nil {
			return
		}
		if strings.HasPrefix(s, "-") || strings.ContainsAny(s, " \t\n\x00=,\\") || strings.Contains(s, "..") || strings.HasPrefix(s, "/") || len(s) == 0 {
			t.Fatalf("accepted %q", s)
		}
	})
}

func TestCheckRuntime(t *testing.T) {
	for _, tc := range []struct {
		v  string
		ok bool
	}{
		{"runc", true}, {"io.containerd.runc.v2", true}, {"containerd/runc", true}, {"host", true},
		{"/usr/sbin/runc", true}, // podman's config.dump
		{"", false}, {"-x", false}, {"--root=/", false}, {"/usr/../bin/sh", false}, {"run c", false},
	} {
		t.Run(tc.v, func(t *testing.T) {
			if err := CheckRuntime("config.dump", tc.v); (err == nil) != tc.ok {
				t.Fatalf("CheckRuntime(%q) = %v, want ok %v", tc.v, err, tc.ok)
			}
		})
	}
}
