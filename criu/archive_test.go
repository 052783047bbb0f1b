package criu

import (
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

// TestRestoreRefusesInvalidArchives runs Restore on each invalid archive and
// checks that it fails before CRIU runs and writes nothing anywhere: the
// work root stays empty and nothing appears beside the archive.
func TestRestoreRefusesInvalidArchives(t *testing.T) {
	for _, tc := range archivetest.Cases() {
		if tc.WantErr == "" {
			continue
		}
		t.Run(tc.Name, func(t *testing.T) {
			dir := t.TempDir()
			archive := filepath.Join(dir, "a.tar")
			if err := os.WriteFile(archive, archivetest.Tar(t, tc.Members), 0o600); err != nil {
				t.Fatal(err)
			}
			work := filepath.Join(dir, "work")
			// A criu that must never run.
			_, err := Restore(t.Context(), archive, RestoreOptions{Binary: Binary{Path: "/nonexistent/criu"}, WorkRoot: work})
			if !errors.Is(err, ErrInvalidArchive) || !strings.Contains(err.Error(), tc.WantErr) {
				t.Fatalf("error %v, want ErrInvalidArchive with %q", err, tc.WantErr)
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
