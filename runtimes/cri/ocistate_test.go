package cri

import (
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestParseOCIState(t *testing.T) {
	tests := []struct {
		name    string
		data    string
		want    specs.State
		wantErr bool
	}{
		{"runc created", `{"ociVersion":"1.0.2-dev","id":"abc","pid":4242,"status":"created","bundle":"/b","rootfs":"/b/rootfs","created":"2026-11-25T19:00:00Z","owner":""}`,
			specs.State{Version: "1.0.2-dev", ID: "abc", Status: specs.StateCreated, Pid: 4242, Bundle: "/b"}, false},
		{"crun running", `{"ociVersion":"1.0.0","id":"x","pid":7,"status":"running","bundle":"/b","created":"2026-11-25T19:00:00Z"}`,
			specs.State{Version: "1.0.0", ID: "x", Status: specs.StateRunning, Pid: 7, Bundle: "/b"}, false},
		{"stopped", `{"id":"x","pid":0,"status":"stopped"}`, specs.State{ID: "x", Status: specs.StateStopped}, false},
		{"no id", `{"pid":7,"status":"running"}`, specs.State{}, true},
		{"not json", `container "x" does not exist`, specs.State{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseOCIState([]byte(tt.data))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want error %v", err, tt.wantErr)
			}
			if got.ID != tt.want.ID || got.Pid != tt.want.Pid || got.Status != tt.want.Status || got.Bundle != tt.want.Bundle || got.Version != tt.want.Version {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func FuzzParseOCIState(f *testing.F) {
	f.Add([]byte(`{"ociVersion":"1.0.2-dev","id":"abc","pid":4242,"status":"created","bundle":"/b"}`))
	f.Add([]byte(`{"id":"x","pid":-1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := ParseOCIState(data)
		if err == nil && st.ID == "" {
			t.Errorf("accepted a state without an id: %q", data)
		}
	})
}
