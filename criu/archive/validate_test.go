package archive

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type member struct {
	name, link string
	typ        byte
	body       string
}

func makeTar(t testing.TB, ms []member) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range ms {
		h := &tar.Header{Name: m.name, Typeflag: m.typ, Mode: 0o600, Linkname: m.link, Size: int64(len(m.body))}
		if m.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte(m.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// good is the smallest archive that passes validation.
func good() []member {
	return []member{
		{name: "checkpoint/", typ: tar.TypeDir},
		{name: "checkpoint/inventory.img", typ: tar.TypeReg, body: "inv"},
		{name: "config.dump", typ: tar.TypeReg, body: "{}"},
		{name: "spec.dump", typ: tar.TypeReg, body: "{}"},
	}
}

func with(extra ...member) []member { return append(good(), extra...) }

func without(name string) []member {
	var out []member
	for _, m := range good() {
		if m.name != name {
			out = append(out, m)
		}
	}
	return out
}

var archiveCases = []struct {
	name    string
	members []member
	wantErr string // "" means valid
}{
	{"minimal archive", good(), ""},
	{"tar's ./ prefix", []member{
		{name: "./checkpoint/", typ: tar.TypeDir},
		{name: "./checkpoint/inventory.img", typ: tar.TypeReg},
		{name: "./config.dump", typ: tar.TypeReg}, {name: "./spec.dump", typ: tar.TypeReg},
	}, ""},
	{"symlink inside the archive", with(member{name: "checkpoint/link", typ: tar.TypeSymlink, link: "inventory.img"}), ""},
	{"missing checkpoint/", without("checkpoint/"), "no checkpoint/ directory entry"},
	{"missing config.dump", without("config.dump"), "no regular file config.dump"},
	{"missing spec.dump", without("spec.dump"), "no regular file spec.dump"},
	{"missing inventory.img", without("checkpoint/inventory.img"), "no regular file checkpoint/inventory.img"},
	{"absolute path", with(member{name: "/etc/cron.d/evil", typ: tar.TypeReg, body: "x"}), "absolute path"},
	{"dot-dot entry", with(member{name: "checkpoint/../../evil", typ: tar.TypeReg, body: "x"}), `contains ".."`},
	{"symlink to an absolute path", with(member{name: "checkpoint/out", typ: tar.TypeSymlink, link: "/etc"}), "outside the archive"},
	{"symlink up and out", with(member{name: "checkpoint/out", typ: tar.TypeSymlink, link: "../../etc"}), "outside the archive"},
	{"entry through a symlink", with(
		member{name: "checkpoint/dir", typ: tar.TypeSymlink, link: "."},
		member{name: "checkpoint/dir/x", typ: tar.TypeReg, body: "x"},
	), "not a directory"},
	{"hard link", with(member{name: "checkpoint/hard", typ: tar.TypeLink, link: "config.dump"}), "only directories, regular files and symlinks"},
	{"device", with(member{name: "checkpoint/dev", typ: tar.TypeChar}), "only directories, regular files and symlinks"},
	{"duplicate entry", with(member{name: "config.dump", typ: tar.TypeReg, body: "again"}), "appears twice"},
}

func TestValidate(t *testing.T) {
	for _, tc := range archiveCases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Validate(bytes.NewReader(makeTar(t, tc.members)))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("valid archive refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want ErrInvalid with %q", err, tc.wantErr)
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
		if tc.wantErr == "" || strings.HasPrefix(tc.name, "missing") || tc.name == "duplicate entry" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "inside")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			err := Unpack(bytes.NewReader(makeTar(t, tc.members)), dir, Limits{})
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
		f.Add(makeTar(f, tc.members))
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
