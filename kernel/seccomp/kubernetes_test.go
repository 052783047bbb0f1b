package seccomp

import (
	"errors"
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
