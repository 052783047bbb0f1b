package transfer

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"filippo.io/age"

	"github.com/nodeshim/nodeshim/internal/errdefs"
)

func TestNewInfo(t *testing.T) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	pw, err := age.NewScryptIdentity("secret")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, addr string
		ids        []age.Identity
		port       int
		says       string
	}{
		{"any host", ":10443", []age.Identity{id}, 10443, ""},
		{"ipv6", "[::1]:9443", []age.Identity{pw, id}, 9443, ""},
		{"no port", "10.0.0.1", []age.Identity{id}, 0, `api.tcpAddress "10.0.0.1"`},
		{"port 0", "127.0.0.1:0", []age.Identity{id}, 0, `port "0" is not a port number`},
		{"named port", "127.0.0.1:https", []age.Identity{id}, 0, `port "https" is not a port number`},
		{"no X25519 identity", "127.0.0.1:9443", []age.Identity{pw}, 0, "hold no X25519 identity"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in, err := NewInfo(tt.addr, tt.ids)
			if tt.says != "" {
				if err == nil || !strings.Contains(err.Error(), tt.says) || !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("NewInfo(%q) = %+v, %v; want an invalid-argument error saying %q", tt.addr, in, err, tt.says)
				}
				return
			}
			if err != nil || in.Port != tt.port || len(in.Recipients) != 1 || in.Recipients[0] != id.Recipient().String() {
				t.Fatalf("NewInfo(%q) = %+v, %v", tt.addr, in, err)
			}
		})
	}
}

func TestInfoHandler(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   Info
		err  error
		code int
		says string
	}{
		{"receives", Info{Port: 9443, Recipients: []string{"age1x"}}, nil, http.StatusOK, `"port":9443`},
		{"receives none", Info{}, ErrNotEnabled, http.StatusNotFound, "receives no transfers"},
		{"configuration broken", Info{}, errors.New("checkpoint.encryption.identities: no such file"), http.StatusServiceUnavailable, "no such file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			InfoHandler(func() (Info, error) { return tt.in, tt.err }).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/transfers", nil))
			if w.Code != tt.code || !strings.Contains(w.Body.String(), tt.says) {
				t.Fatalf("%d %s, want %d saying %q", w.Code, w.Body.String(), tt.code, tt.says)
			}
		})
	}
}
