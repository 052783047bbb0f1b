package profiles

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSymlinksBelowRootNeverFollowed: a symbolic link below the seccomp
// root (a directory of a profile's name, or the profile's file itself)
// pointing at a directory or a file outside is never written, read or
// removed through. Check refuses it naming the link (a conflict, like a
// foreign file), Apply installs nothing, and nothing outside changes. A
// link planted between the check and the write fails the write the same
// way (openat2 RESOLVE_NO_SYMLINKS, not the check, is what guards).
func TestSymlinksBelowRootNeverFollowed(t *testing.T) {
	const hostFile = "a host file\n"
	tests := []struct {
		name string
		set  map[string]string
		// link is made below kubelet/seccomp, pointing at target (below
		// the test's directory), before (or, with late, during) Apply.
		link, target string
		late         bool
	}{
		{"directory link to a directory outside", map[string]string{"team/b.json": deny}, "team", "outside", false},
		{"directory link deeper down", map[string]string{"a/b/c/d.json": deny}, "a/b", "outside", false},
		{"file link to a file outside", map[string]string{"a.json": allow}, "a.json", "outside/victim.json", false},
		{"directory link to a file outside", map[string]string{"team/b.json": deny}, "team", "outside/victim.json", false},
		{"link planted after the check", map[string]string{"team/b.json": deny}, "team", "outside", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.write("outside/victim.json", hostFile)
			outside := filepath.Join(e.dir, "outside")
			in := e.installer("kubelet")
			link := filepath.Join(in.Root, filepath.FromSlash(tc.link))
			plant := func() {
				if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(filepath.Join(e.dir, tc.target), link); err != nil {
					t.Fatal(err)
				}
			}
			if tc.late {
				if err := os.MkdirAll(in.Root, 0o755); err != nil {
					t.Fatal(err)
				}
				in.crashPoint = func(step string) {
					if step == "intent" {
						plant()
					}
				}
			} else {
				plant()
				err := in.Check(tc.set)
				var pe *ProfileError
				if !errors.Is(err, ErrSymlink) || !errors.As(err, &pe) || !strings.Contains(err.Error(), link) {
					t.Fatalf("Check = %v, want a ProfileError wrapping %v naming %s", err, ErrSymlink, link)
				}
				if reason(err) != ReasonProfileConflict {
					t.Errorf("reason %s, want %s", reason(err), ReasonProfileConflict)
				}
			}
			_, err := in.Apply(tc.set)
			if !errors.Is(err, ErrSymlink) || !strings.Contains(err.Error(), link) {
				t.Fatalf("Apply = %v, want %v naming %s", err, ErrSymlink, link)
			}
			entries, err := os.ReadDir(outside)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 || entries[0].Name() != "victim.json" {
				t.Errorf("outside holds %v, want victim.json alone", entries)
			}
			if b, err := os.ReadFile(filepath.Join(outside, "victim.json")); err != nil || string(b) != hostFile {
				t.Errorf("victim.json = %q, %v", b, err)
			}
			if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Errorf("the link was replaced or removed: %v %v", fi, err)
			}
		})
	}
}

// TestRemovalNeverFollowsSymlinks: a profile nodeshim installed whose
// directory is then replaced by a link to a directory outside holding a
// file of the same content is not removed through the link when it is no
// longer configured: the file outside stays.
func TestRemovalNeverFollowsSymlinks(t *testing.T) {
	e := newEnv(t)
	in := e.installer("kubelet")
	if _, err := in.Apply(map[string]string{"team/b.json": deny}); err != nil {
		t.Fatal(err)
	}
	team := filepath.Join(in.Root, "team")
	if err := os.RemoveAll(team); err != nil {
		t.Fatal(err)
	}
	e.write("outside/b.json", deny)
	if err := os.Symlink(filepath.Join(e.dir, "outside"), team); err != nil {
		t.Fatal(err)
	}
	installed, err := in.Apply(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(installed) != 0 {
		t.Errorf("installed %v", installed)
	}
	if b, err := os.ReadFile(filepath.Join(e.dir, "outside", "b.json")); err != nil || string(b) != deny {
		t.Errorf("outside/b.json = %q, %v: removed through the link", b, err)
	}
}
