package criu

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeshim/nodeshim/criu/archive/archivetest"
	"github.com/nodeshim/nodeshim/internal/errdefs"
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

// TestRestoreRefusesInvalidArchives runs Restore on each invalid archive and
// checks that it fails before CRIU runs and writes nothing anywhere: the
// work root stays empty and nothing appears beside the archive.
func TestRestoreRefusesInvalidArchives(t *testing.T) {
	for _, tc := range archiveCases {
		if tc.wantErr == "" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			archive := filepath.Join(dir, "a.tar")
			if err := os.WriteFile(archive, makeTar(t, tc.members), 0o600); err != nil {
				t.Fatal(err)
			}
			work := filepath.Join(dir, "work")
			// A criu that must never run.
			_, err := Restore(t.Context(), archive, RestoreOptions{Binary: Binary{Path: "/nonexistent/criu"}, WorkRoot: work})
			if !errors.Is(err, ErrInvalidArchive) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want ErrInvalidArchive with %q", err, tc.wantErr)
			}
			ents, _ := os.ReadDir(dir)
			if len(ents) != 1 {
				t.Errorf("restore wrote beside the archive: %v", ents)
			}
		})
	}
}

func TestTargetValidate(t *testing.T) {
	ok := ContainerRef{Namespace: "ns", Pod: "p", Container: "c"}
	cases := []struct {
		name    string
		target  Target
		wantErr bool
	}{
		{"valid", Target{Pid: 1, Ref: ok}, false},
		{"no pid", Target{Ref: ok}, true},
		{"slash in pod", Target{Pid: 1, Ref: ContainerRef{Namespace: "ns", Pod: "../x", Container: "c"}}, true},
		{"empty container", Target{Pid: 1, Ref: ContainerRef{Namespace: "ns", Pod: "p"}}, true},
		{"one character", Target{Pid: 1, Ref: ContainerRef{Namespace: "n", Pod: "p", Container: "9"}}, false},
		{"upper case, '-', '_' and '.' inside", Target{Pid: 1, Ref: ContainerRef{Namespace: "kube-system", Pod: "Web_0.x", Container: "c-1"}}, false},
		{"253 characters", Target{Pid: 1, Ref: ContainerRef{Namespace: "ns", Pod: strings.Repeat("a", 253), Container: "c"}}, false},
		{"254 characters", Target{Pid: 1, Ref: ContainerRef{Namespace: "ns", Pod: strings.Repeat("a", 254), Container: "c"}}, true},
		{"starts with '-'", Target{Pid: 1, Ref: ContainerRef{Namespace: "-ns", Pod: "p", Container: "c"}}, true},
		{"ends with '.'", Target{Pid: 1, Ref: ContainerRef{Namespace: "ns", Pod: "p", Container: "c."}}, true},
		{"one '_'", Target{Pid: 1, Ref: ContainerRef{Namespace: "ns", Pod: "_", Container: "c"}}, true},
		{"space inside", Target{Pid: 1, Ref: ContainerRef{Namespace: "ns", Pod: "a b", Container: "c"}}, true},
		{"non-ASCII letter", Target{Pid: 1, Ref: ContainerRef{Namespace: "ns", Pod: "caf\u00e9", Container: "c"}}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.target.Validate(); (err != nil) != tc.wantErr {
				t.Errorf("Validate() = %v, want error %v", err, tc.wantErr)
			}
		})
	}
}

// TestStatusDump checks status.dump, which containerd 2.x's restore
// decodes into a CRI ContainerStatus: the runtime's own status verbatim,
// else one built from the target.
func TestStatusDump(t *testing.T) {
	created := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	base := Target{Pid: 42, ID: "abc", Ref: ContainerRef{Namespace: "default", Pod: "web-0", Container: "app"},
		Image: "localhost/x:1", ImageRef: "sha256:0123", Created: created, Annotations: map[string]string{"a": "b"}}
	withStatus := base
	withStatus.Status = &runtimeapi.ContainerStatus{Id: "abc", Metadata: &runtimeapi.ContainerMetadata{Name: "app", Attempt: 3},
		Image: &runtimeapi.ImageSpec{Image: "localhost/x:1", UserSpecifiedImage: "x:1"}, LogPath: "/var/log/pods/x/app/0.log"}
	tests := []struct {
		name string
		t    Target
		want *runtimeapi.ContainerStatus
	}{
		{"runtime's status", withStatus, withStatus.Status},
		{"built from the target", base, &runtimeapi.ContainerStatus{
			Id: "abc", Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, State: runtimeapi.ContainerState_CONTAINER_RUNNING,
			CreatedAt: created.UnixNano(), StartedAt: created.UnixNano(), Image: &runtimeapi.ImageSpec{Image: "localhost/x:1"},
			ImageRef: "sha256:0123", Annotations: map[string]string{"a": "b"}, Labels: map[string]string{
				"io.kubernetes.pod.name": "web-0", "io.kubernetes.pod.namespace": "default", "io.kubernetes.container.name": "app"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			files, err := metadata(tc.t, created)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, f := range files {
				names = append(names, f.Name)
			}
			if want := []string{ConfigDump, SpecDump, StatusDump}; !slices.Equal(names, want) {
				t.Fatalf("metadata files %q, want %q", names, want)
			}
			var got runtimeapi.ContainerStatus
			if err := json.Unmarshal(files[2].Data, &got); err != nil {
				t.Fatalf("status.dump %s: %v", files[2].Data, err)
			}
			if !proto.Equal(&got, tc.want) {
				t.Errorf("status.dump decodes to %v, want %v", &got, tc.want)
			}
		})
	}
}

// FuzzValidNamePart checks validNamePart against the rule written as a
// regular expression.
func FuzzValidNamePart(f *testing.F) {
	rule := regexp.MustCompile(`^[a-zA-Z0-9]([-a-zA-Z0-9_.]{0,251}[a-zA-Z0-9])?$`)
	for _, s := range []string{"", "a", "-", "a-", "a_b.c-d", "caf\u00e9", strings.Repeat("a", 253), strings.Repeat("a", 254), "a\nb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := validNamePart(s), rule.MatchString(s); got != want {
			t.Errorf("validNamePart(%q) = %v, the rule says %v", s, got, want)
		}
	})
}

// TestRestoreRefusesHostileArchives: a chain of symlinks out of the work
// directory (each link alone inside the archive) and a sparse member of
// 4 GiB in an archive of a few KiB are refused by Restore before CRIU
// runs, with ErrInvalidArchive of class errdefs.ErrInvalidArgument, and
// nothing is written: not the 4 GiB, not the links.
func TestRestoreRefusesHostileArchives(t *testing.T) {
	min := archivetest.Minimal("{}", "{}")
	for _, tc := range []struct {
		name    string
		archive func(t *testing.T) []byte
		wantErr string
	}{
		{"symlink chain out of the work directory", func(t *testing.T) []byte {
			return archivetest.Tar(t, append(min, archivetest.ChainOut(RootfsDiffTar, 2, "etc/passwd")...))
		}, "leads outside the archive"},
		{"sparse member of 4 GiB", func(t *testing.T) []byte {
			return archivetest.TarWith(t, min, archivetest.Sparse("checkpoint/pages-1.img", 4<<30), nil)
		}, `entry "checkpoint/pages-1.img" is sparse and expands to 4294967296 bytes`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "a.tar")
			if err := os.WriteFile(path, tc.archive(t), 0o600); err != nil {
				t.Fatal(err)
			}
			work := filepath.Join(dir, "work")
			_, err := Restore(t.Context(), path, RestoreOptions{Binary: Binary{Path: "/nonexistent/criu"}, WorkRoot: work})
			if !errors.Is(err, ErrInvalidArchive) || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Restore: %v, want ErrInvalidArchive with %q", err, tc.wantErr)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 1 {
				t.Errorf("restore wrote beside the archive: %v", ents)
			}
		})
	}
}
