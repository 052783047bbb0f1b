package seccomp

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func sp(t corev1.SeccompProfileType, localhost ...string) *corev1.SeccompProfile {
	p := &corev1.SeccompProfile{Type: t}
	if len(localhost) > 0 {
		p.LocalhostProfile = &localhost[0]
	}
	return p
}

func TestEffectiveProfile(t *testing.T) {
	yes := true
	no := false
	root := "/var/lib/kubelet/seccomp"
	tests := []struct {
		name    string
		pod     *corev1.PodSecurityContext
		ctr     *corev1.SecurityContext
		opts    KubeletOptions
		want    Effective
		wantErr error
	}{
		{"nothing set", nil, nil, KubeletOptions{}, Effective{Type: corev1.SeccompProfileTypeUnconfined, Source: "default"}, nil},
		{"nothing set, seccompDefault", &corev1.PodSecurityContext{}, &corev1.SecurityContext{}, KubeletOptions{SeccompDefault: true},
			Effective{Type: corev1.SeccompProfileTypeRuntimeDefault, Source: "default"}, nil},
		{"pod only", &corev1.PodSecurityContext{SeccompProfile: sp(corev1.SeccompProfileTypeRuntimeDefault)}, nil, KubeletOptions{},
			Effective{Type: corev1.SeccompProfileTypeRuntimeDefault, Source: "pod"}, nil},
		{"container wins", &corev1.PodSecurityContext{SeccompProfile: sp(corev1.SeccompProfileTypeRuntimeDefault)},
			&corev1.SecurityContext{SeccompProfile: sp(corev1.SeccompProfileTypeUnconfined)}, KubeletOptions{SeccompDefault: true},
			Effective{Type: corev1.SeccompProfileTypeUnconfined, Source: "container"}, nil},
		{"container unset inherits", &corev1.PodSecurityContext{SeccompProfile: sp(corev1.SeccompProfileTypeLocalhost, "profiles/audit.json")},
			&corev1.SecurityContext{Privileged: &no}, KubeletOptions{},
			Effective{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: "profiles/audit.json", Path: root + "/profiles/audit.json", Source: "pod"}, nil},
		{"privileged is unconfined", &corev1.PodSecurityContext{SeccompProfile: sp(corev1.SeccompProfileTypeRuntimeDefault)},
			&corev1.SecurityContext{Privileged: &yes, SeccompProfile: sp(corev1.SeccompProfileTypeLocalhost, "x.json")}, KubeletOptions{SeccompDefault: true},
			Effective{Type: corev1.SeccompProfileTypeUnconfined, Source: "privileged"}, nil},
		{"custom root", nil, &corev1.SecurityContext{SeccompProfile: sp(corev1.SeccompProfileTypeLocalhost, "a/b.json")}, KubeletOptions{SeccompRoot: "/data/kubelet/seccomp"},
			Effective{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: "a/b.json", Path: "/data/kubelet/seccomp/a/b.json", Source: "container"}, nil},
		{"absolute", nil, &corev1.SecurityContext{SeccompProfile: sp(corev1.SeccompProfileTypeLocalhost, "/etc/passwd")}, KubeletOptions{}, Effective{}, ErrLocalhostProfile},
		{"dotdot", nil, &corev1.SecurityContext{SeccompProfile: sp(corev1.SeccompProfileTypeLocalhost, "profiles/../../x.json")}, KubeletOptions{}, Effective{}, ErrLocalhostProfile},
		{"localhost without name", &corev1.PodSecurityContext{SeccompProfile: sp(corev1.SeccompProfileTypeLocalhost)}, nil, KubeletOptions{}, Effective{}, ErrLocalhostProfile},
		{"localhost empty name", &corev1.PodSecurityContext{SeccompProfile: sp(corev1.SeccompProfileTypeLocalhost, "")}, nil, KubeletOptions{}, Effective{}, ErrLocalhostProfile},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := EffectiveProfile(tc.pod, tc.ctr, tc.opts)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("error %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	if _, err := EffectiveProfile(nil, &corev1.SecurityContext{SeccompProfile: sp("Bogus")}, KubeletOptions{}); err == nil {
		t.Error("unknown type accepted")
	}
}

func TestReadLocalhost(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "profiles"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "profiles", "ok.json"), []byte(`{"defaultAction":"SCMP_ACT_LOG"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := KubeletOptions{SeccompRoot: root}
	e, err := EffectiveProfile(nil, &corev1.SecurityContext{SeccompProfile: sp(corev1.SeccompProfileTypeLocalhost, "profiles/ok.json")}, opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ReadLocalhost(e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(b, ParseOptions{}); err != nil {
		t.Fatal(err)
	}

	e, err = EffectiveProfile(&corev1.PodSecurityContext{SeccompProfile: sp(corev1.SeccompProfileTypeLocalhost, "profiles/missing.json")}, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ReadLocalhost(e)
	var cce *CreateContainerError
	if !errors.As(err, &cce) || cce.Reason() != "CreateContainerError" || cce.Path != filepath.Join(root, "profiles/missing.json") {
		t.Fatalf("got %v", err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%v is not ErrNotExist", err)
	}
	want := `CreateContainerError: failed to generate seccomp spec opts: cannot load seccomp profile "` + cce.Path + `": open ` + cce.Path + `: no such file or directory`
	if err.Error() != want {
		t.Errorf("message\n%s\nwant\n%s", err, want)
	}
	if _, err := ReadLocalhost(Effective{Type: corev1.SeccompProfileTypeRuntimeDefault}); err == nil {
		t.Error("RuntimeDefault has no file")
	}
}
