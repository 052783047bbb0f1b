package archive

import (
	"archive/tar"
	"bytes"
	"errors"
	"testing"
)

func TestReadMeta(t *testing.T) {
	for _, tc := range []struct {
		name       string
		config     string
		spec       string
		want       Engine
		wantName   string
		wantErr    bool
		dropConfig bool
	}{
		{name: "podman", config: `{"name":"web","rootfsImageName":"localhost/busybox:latest"}`,
			spec: `{"annotations":{"io.container.manager":"libpod"}}`, want: EnginePodman, wantName: "web"},
		{name: "cri-o", config: `{"name":"app"}`, spec: `{"annotations":{"io.container.manager":"cri-o"}}`, want: EngineCRIO, wantName: "app"},
		{name: "containerd", config: `{"name":"counter","runtime":"cri"}`,
			spec: `{"annotations":{"io.kubernetes.cri.container-type":"container","io.kubernetes.cri.container-name":"counter"}}`,
			want: EngineContainerd, wantName: "counter"},
		{name: "process", config: `{"name":"sleep","runtime":"host"}`, spec: `{"annotations":{}}`, want: EngineProcess, wantName: "sleep"},
		{name: "unknown", config: `{}`, spec: `{}`, want: EngineUnknown},
		{name: "bad-config", config: `{`, spec: `{}`, wantErr: true},
		{name: "bad-spec", config: `{}`, spec: `[`, wantErr: true},
		{name: "no-config", spec: `{}`, dropConfig: true, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := []member{{Name: "checkpoint/", Type: tar.TypeDir}, {Name: "spec.dump", Type: tar.TypeReg, Body: tc.spec}}
			if !tc.dropConfig {
				ms = append(ms, member{Name: "./config.dump", Type: tar.TypeReg, Body: tc.config})
			}
			m, err := ReadMeta(bytes.NewReader(makeTar(t, ms)))
			if tc.wantErr {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("error %v, want one wrapping ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Engine != tc.want || m.Config.Name != tc.wantName {
				t.Errorf("engine %q name %q, want %q %q", m.Engine, m.Config.Name, tc.want, tc.wantName)
			}
		})
	}
}

func FuzzReadMeta(f *testing.F) {
	f.Add(makeTar(f, good()))
	f.Add(makeTar(f, []member{{Name: "config.dump", Type: tar.TypeReg, Body: `{"runtime":"host"}`},
		{Name: "spec.dump", Type: tar.TypeReg, Body: `{"annotations":{"io.container.manager":"libpod"}}`}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ReadMeta(bytes.NewReader(b))
		if err == nil && (m.ConfigDump == nil || m.SpecDump == nil || m.Engine == "") {
			t.Fatalf("no error but %+v", m)
		}
	})
}
