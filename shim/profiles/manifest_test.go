package profiles

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestCheckName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"audit.json", true}, {"team/deny.json", true}, {"a..b", true}, {"x/y/z", true},
		{"", false}, {"/abs", false}, {"../x", false}, {"a/../b", false}, {"./a", false}, {"a/", false},
		{"a//b", false}, {".hidden", false}, {"a/.b", false}, {"a\x00b", false}, {"\xff", false},
	} {
		if err := CheckName(tc.name); (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrName)) {
			t.Errorf("CheckName(%q) = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func TestParseManifest(t *testing.T) {
	h := Hash([]byte("x"))
	for _, tc := range []struct {
		name, data string
		ok         bool
	}{
		{"empty", `{"profiles":[]}`, true},
		{"one", `{"profiles":[{"name":"a/b.json","path":"/r/a/b.json","sha256":"` + h + `","installedAt":"2026-01-01T00:00:00Z"}]}`, true},
		{"unknown field", `{"profiles":[],"x":1}`, false},
		{"relative path", `{"profiles":[{"name":"a","path":"r/a","sha256":"` + h + `"}]}`, false},
		{"unclean path", `{"profiles":[{"name":"a","path":"/r/../a","sha256":"` + h + `"}]}`, false},
		{"path not ending in name", `{"profiles":[{"name":"a","path":"/r/b","sha256":"` + h + `"}]}`, false},
		{"bad hash", `{"profiles":[{"name":"a","path":"/r/a","sha256":"XYZ"}]}`, false},
		{"bad name", `{"profiles":[{"name":"../a","path":"/a","sha256":"` + h + `"}]}`, false},
		{"twice", `{"profiles":[{"name":"a","path":"/r/a","sha256":"` + h + `"},{"name":"a","path":"/r/a","sha256":"` + h + `"}]}`, false},
		{"trailing", `{"profiles":[]} {}`, false},
		{"not json", `profiles`, false},
	} {
		_, err := parseManifest([]byte(tc.data))
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrManifest)) {
			t.Errorf("%s: parseManifest = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// FuzzParseManifest: the manifest decides which files nodeshim may remove,
// so whatever it accepts must be safe to act on: absolute, clean paths
// ending in a valid name, each once, and it re-encodes to the same value.
func FuzzParseManifest(f *testing.F) {
	h := Hash([]byte("x"))
	f.Add([]byte(`{"profiles":[{"name":"a/b.json","path":"/r/a/b.json","sha256":"` + h + `","installedAt":"2026-01-01T00:00:00Z"}]}`))
	f.Add([]byte(`{"profiles":null}`))
	f.Add([]byte(`{"profiles":[{"name":"a","path":"/a/../a","sha256":"` + h + `"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := parseManifest(data)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, p := range m.Profiles {
			if CheckName(p.Name) != nil || p.Path == "" || p.Path[0] != '/' || seen[p.Path] {
				t.Fatalf("accepted %+v", p)
			}
			seen[p.Path] = true
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parseManifest(again); err != nil {
			t.Fatalf("re-encoded manifest refused: %v", err)
		}
	})
}

// FuzzCheckName: an accepted name stays below the seccomp root and never
// looks like one of nodeshim's hidden staging files.
func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"audit.json", "a/b", "../x", ".x", "a/./b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if CheckName(name) != nil {
			return
		}
		for i := 0; i < len(name); i++ {
			if (i == 0 || name[i-1] == '/') && name[i] == '.' {
				t.Fatalf("accepted %q: an element starts with a dot", name)
			}
		}
		if name[0] == '/' || name[len(name)-1] == '/' {
			t.Fatalf("accepted %q", name)
		}
	})
}
