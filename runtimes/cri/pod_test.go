package cri

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestSecurityFromVerboseInfo(t *testing.T) {
	localhost := &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "/var/lib/kubelet/seccomp/p.json"}
	tests := []struct {
		name       string
		info       map[string]string
		privileged bool
		seccomp    *runtimeapi.SecurityProfile
		ok         bool
		wantErr    bool
	}{
		{"no info (CRI-O)", map[string]string{}, false, nil, false, false},
		{"no config", map[string]string{"info": `{"pid":1}`}, false, nil, false, false},
		{"no security context", map[string]string{"info": `{"config":{"metadata":{"name":"c"}}}`}, false, nil, true, false},
		{"unset seccomp", map[string]string{"info": `{"config":{"linux":{"security_context":{}}}}`}, false, nil, true, false},
		// RuntimeDefault is the enum's zero: encoding/json omits it.
		{"runtime default", map[string]string{"info": `{"config":{"linux":{"security_context":{"seccomp":{}}}}}`},
			false, &runtimeapi.SecurityProfile{}, true, false},
		{"unconfined", map[string]string{"info": `{"config":{"linux":{"security_context":{"seccomp":{"profile_type":1}}}}}`},
			false, &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, true, false},
		{"localhost, privileged", map[string]string{"info": `{"config":{"linux":{"security_context":{"privileged":true,"seccomp":{"profile_type":2,"localhost_ref":"/var/lib/kubelet/seccomp/p.json"}}}}}`},
			true, localhost, true, false},
		{"not json", map[string]string{"info": `{`}, false, nil, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			priv, sp, ok, err := SecurityFromVerboseInfo(tt.info)
			if (err != nil) != tt.wantErr || ok != tt.ok || priv != tt.privileged {
				t.Fatalf("privileged %v, ok %v, err %v", priv, ok, err)
			}
			if (sp == nil) != (tt.seccomp == nil) || sp != nil && (sp.ProfileType != tt.seccomp.ProfileType || sp.LocalhostRef != tt.seccomp.LocalhostRef) {
				t.Errorf("seccomp %v, want %v", sp, tt.seccomp)
			}
		})
	}
}

func FuzzSecurityFromVerboseInfo(f *testing.F) {
	f.Add(`{"config":{"linux":{"security_context":{"privileged":true,"seccomp":{"profile_type":2,"localhost_ref":"/p"}}}}}`)
	f.Add(`{"config":{"linux":{"security_context":{"seccomp":{}}}}}`)
	f.Fuzz(func(t *testing.T, raw string) {
		_, sp, ok, err := SecurityFromVerboseInfo(map[string]string{"info": raw})
		if (err != nil || !ok) && sp != nil {
			t.Errorf("a profile without a config: %v", sp)
		}
	})
}
