package archive

import (
	"github.com/nodeshim/nodeshim/criu/archive/archivetest"

	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// member, makeTar and good are archivetest's, by shorter names for this
// package's tables.
type member = archivetest.Member

func makeTar(t testing.TB, ms []member) []byte { return archivetest.Tar(t, ms) }

func good() []member { return archivetest.Minimal("{}", "{}") }

// archiveCases are the archives Validate accepts and refuses.
var archiveCases = archivetest.Cases()

func TestValidate(t *testing.T) {
	for _, tc := range archiveCases {
		t.Run(tc.Name, func(t *testing.T) {
			_, err := Validate(bytes.NewReader(makeTar(t, tc.Members)))
			if tc.WantErr == "" {
				if err != nil {
					t.Fatalf("valid archive refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.WantErr) {
				t.Fatalf("error %v, want ErrInvalid with %q", err, tc.WantErr)
			}
		})
	}
	t.Run("not a tar", func(t *testing.T) {
		if _, err := Validate(strings.NewReader(strings.Repeat("garbage", 200))); !errors.Is(err, ErrInvalid) {
			t.Fatalf("error %v, want ErrInvalid", err)
		}
	})
}

// TestUnpackStaysInside feeds Unpack, which re-checks every entry, archives
// that skip ValidateArchive and checks nothing lands outside its directory.
func TestUnpackStaysInside(t *testing.T) {
	for _, tc := range archiveCases {
		if tc.WantErr == "" || strings.HasPrefix(tc.Name, "missing") || tc.Name == "duplicate entry" {
			continue
		}
		t.Run(tc.Name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "inside")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			err := Unpack(bytes.NewReader(makeTar(t, tc.Members)), dir, Limits{})
			if err == nil {
				t.Fatal("Unpack accepted it")
			}
			ents, _ := os.ReadDir(parent)
			if len(ents) != 1 {
				t.Errorf("Unpack wrote outside %s: %v", dir, ents)
			}
		})
	}
}

func FuzzValidate(f *testing.F) {
	for _, tc := range archiveCases {
		f.Add(makeTar(f, tc.Members))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, err := Validate(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error not wrapping ErrInvalid: %v", err)
			}
			return
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name, "/") || strings.Contains("/"+e.Name+"/", "/../") {
				t.Fatalf("accepted entry %q", e.Name)
			}
		}
	})
}

func TestName(t *testing.T) {
	ref := ContainerRef{Namespace: "default", Pod: "web-0", Container: "nginx"}
	at := time.Date(2025, 1, 2, 3, 4, 5, 999, time.FixedZone("CET", 3600))
	cases := []struct {
		name    string
		attempt int
		want    string
	}{
		{"kubelet's name, in UTC", 0, "checkpoint-web-0_default-nginx-2025-01-02T02:04:05Z.tar"},
		{"first collision", 1, "checkpoint-web-0_default-nginx-2025-01-02T02:04:05Z-1.tar"},
		{"tenth collision", 10, "checkpoint-web-0_default-nginx-2025-01-02T02:04:05Z-10.tar"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Name(ref, at, tc.attempt); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}
