package ref

import (
	"encoding/json"
	"testing"
)

func TestContainer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ref      Container
		wantStr  string
		wantJSON string
	}{
		{"full", Container{"default", "web", "nginx"}, "default/web/nginx", `{"namespace":"default","pod":"web","container":"nginx"}`},
		{"empty", Container{}, "//", `{"namespace":"","pod":"","container":""}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.ref.String(); got != tc.wantStr {
				t.Errorf("String() = %q, want %q", got, tc.wantStr)
			}
			b, err := json.Marshal(tc.ref)
			if err != nil || string(b) != tc.wantJSON {
				t.Errorf("json = %s, %v; want %s", b, err, tc.wantJSON)
			}
		})
	}
}
