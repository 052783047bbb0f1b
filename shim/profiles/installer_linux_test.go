package profiles

import (
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodeshim/nodeshim/kernel/seccomp"
)

const (
	allow = `{"defaultAction":"SCMP_ACT_ALLOW"}`
	deny  = `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["read","write","exit_group"],"action":"SCMP_ACT_ALLOW"}]}`
	bad   = `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["read"],"action":"SCMP_ACT_LOG"},{"names":["write"],"action":"SCMP_ACT_BOGUS"}]}`
)

type env struct {
	t     *testing.T
	dir   string
	clock *clocktesting.FakePassiveClock
}

func newEnv(t *testing.T) *env {
	return &env{t: t, dir: t.TempDir(), clock: clocktesting.NewFakePassiveClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}
}

func (e *env) installer(root string) *Installer {
	return &Installer{Root: filepath.Join(e.dir, root, "seccomp"), StateDir: filepath.Join(e.dir, "state"),
		Parse: Node(), Clock: e.clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// files lists every regular file under dir/root/seccomp with its content.
func (e *env) files(root string) map[string]string {
	e.t.Helper()
	out := map[string]string{}
	base := filepath.Join(e.dir, root, "seccomp")
	filepath.WalkDir(base, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		b, rerr := os.ReadFile(path)
		if rerr != nil {
			e.t.Fatal(rerr)
		}
		rel, _ := filepath.Rel(base, path)
		out[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	return out
}

func (e *env) write(rel, content string) {
	e.t.Helper()
	p := filepath.Join(e.dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// step is one Apply of a sequence.
type step struct {
	root string // "kubelet" when empty
	set  map[string]string
	// before changes the machine before the Apply (another writer).
	before func(e *env)
	// wantErr is the error reason (Condition's), "" for none.
	wantErr string
	// wantFiles is every file under the seccomp root afterwards.
	wantFiles map[string]string
	// wantInstalled are the names Apply reports.
	wantInstalled []string
	check         func(t *testing.T, installed []Installed, err error)
}

func TestApply(t *testing.T) {
	first := step{set: map[string]string{"a.json": allow, "team/b.json": deny},
		wantFiles: map[string]string{"a.json": allow, "team/b.json": deny}, wantInstalled: []string{"a.json", "team/b.json"}}
	tests := []struct {
		name  string
		steps []step
	}{
		{"install", []step{first}},
		{"nothing configured, nothing written", []step{{set: nil, wantFiles: map[string]string{}}}},
		{"update", []step{first, {
			set:       map[string]string{"a.json": deny, "team/b.json": deny},
			wantFiles: map[string]string{"a.json": deny, "team/b.json": deny}, wantInstalled: []string{"a.json", "team/b.json"},
			check: func(t *testing.T, in []Installed, _ error) {
				if !in[0].InstalledAt.After(in[1].InstalledAt) {
					t.Errorf("install times %v, %v: only the changed profile is rewritten", in[0].InstalledAt, in[1].InstalledAt)
				}
				if in[0].SHA256 != Hash([]byte(deny)) {
					t.Errorf("hash %s, want the new content's", in[0].SHA256)
				}
			},
		}}},
		{"removal of what is no longer configured", []step{first, {
			set: map[string]string{"a.json": allow}, wantFiles: map[string]string{"a.json": allow}, wantInstalled: []string{"a.json"},
		}, {
			set: nil, wantFiles: map[string]string{},
		}}},
		{"foreign profiles untouched", []step{{
			before: func(e *env) {
				e.write("kubelet/seccomp/foreign.json", "theirs")
				e.write("kubelet/seccomp/team/other.json", "theirs too")
			},
			set:           map[string]string{"a.json": allow, "team/b.json": deny},
			wantFiles:     map[string]string{"a.json": allow, "team/b.json": deny, "foreign.json": "theirs", "team/other.json": "theirs too"},
			wantInstalled: []string{"a.json", "team/b.json"},
		}, {
			set: nil, wantFiles: map[string]string{"foreign.json": "theirs", "team/other.json": "theirs too"},
		}}},
		{"a foreign file in the way installs nothing", []step{{
			before:    func(e *env) { e.write("kubelet/seccomp/a.json", "theirs") },
			set:       map[string]string{"a.json": allow, "c.json": allow},
			wantErr:   ReasonProfileConflict,
			wantFiles: map[string]string{"a.json": "theirs"},
			check: func(t *testing.T, _ []Installed, err error) {
				if !errors.Is(err, ErrForeign) || !strings.Contains(err.Error(), "seccomp profile a.json: ") {
					t.Errorf("error %v, want a.json named as foreign", err)
				}
			},
		}}},
		{"a bad profile installs nothing and keeps the previous set", []step{first, {
			set:       map[string]string{"a.json": deny, "c.json": allow, "team/b.json": bad},
			wantErr:   ReasonInvalidProfile,
			wantFiles: map[string]string{"a.json": allow, "team/b.json": deny}, wantInstalled: []string{"a.json", "team/b.json"},
			check: func(t *testing.T, _ []Installed, err error) {
				var pe *ProfileError
				if !errors.As(err, &pe) || pe.Name != "team/b.json" || pe.JSONPath != "syscalls[1].action" ||
					!errors.Is(err, seccomp.ErrUnknownAction) {
					t.Errorf("error %#v, want team/b.json at syscalls[1].action", pe)
				}
				if want := `seccomp profile team/b.json: syscalls[1].action: unknown action "SCMP_ACT_BOGUS"`; err.Error() != want {
					t.Errorf("message %q, want %q", err.Error(), want)
				}
			},
		}}},
		{"a profile that does not parse", []step{{
			set:     map[string]string{"a.json": `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["read",]}]}`},
			wantErr: ReasonInvalidProfile, wantFiles: map[string]string{},
			check: func(t *testing.T, _ []Installed, err error) {
				var pe *ProfileError
				if !errors.As(err, &pe) || pe.JSONPath != "syscalls[0].names[1]" || !errors.Is(err, seccomp.ErrSyntax) {
					t.Errorf("error %v, want a syntax error at syscalls[0].names[1]", err)
				}
			},
		}}},
		{"a profile libseccomp cannot compile", []step{{
			set:     map[string]string{"a.json": `{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_M68K"]}`},
			wantErr: ReasonInvalidProfile, wantFiles: map[string]string{},
			check: func(t *testing.T, _ []Installed, err error) {
				if !errors.Is(err, seccomp.ErrCompile) {
					t.Errorf("error %v, want a compile error", err)
				}
			},
		}}},
		{"bad names", []step{{
			set: map[string]string{"../x.json": allow, "/abs.json": allow, ".hidden": allow, "d/./e": allow,
				"f": allow, "f/g.json": allow, "h//i": allow},
			wantErr: ReasonInvalidProfile, wantFiles: map[string]string{},
			check: func(t *testing.T, _ []Installed, err error) {
				for _, n := range []string{"../x.json", "/abs.json", ".hidden", "d/./e", "seccomp profile f: ", "h//i"} {
					if !strings.Contains(err.Error(), n) {
						t.Errorf("error %v does not name %s", err, n)
					}
				}
				if strings.Contains(err.Error(), "f/g.json: ") {
					t.Errorf("error %v blames f/g.json", err)
				}
			},
		}}},
		{"changed since installed: left in place when no longer configured", []step{first, {
			before:    func(e *env) { e.write("kubelet/seccomp/a.json", "edited") },
			set:       nil,
			wantFiles: map[string]string{"a.json": "edited"},
		}, {
			// No longer ours: configuring it again is a conflict.
			set: map[string]string{"a.json": allow}, wantErr: ReasonProfileConflict, wantFiles: map[string]string{"a.json": "edited"},
		}}},
		{"changed or deleted while configured: repaired", []step{first, {
			before: func(e *env) {
				e.write("kubelet/seccomp/a.json", "edited")
				os.Remove(filepath.Join(e.dir, "kubelet/seccomp/team/b.json"))
			},
			set:       first.set,
			wantFiles: first.wantFiles, wantInstalled: first.wantInstalled,
		}}},
		{"kubelet root changed", []step{first, {
			root:      "srv",
			set:       map[string]string{"a.json": allow},
			wantFiles: map[string]string{"a.json": allow}, wantInstalled: []string{"a.json"},
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			for i, s := range tt.steps {
				e.clock.SetTime(e.clock.Now().Add(time.Minute))
				root := s.root
				if root == "" {
					root = "kubelet"
				}
				if s.before != nil {
					s.before(e)
				}
				in := e.installer(root)
				checkErr := in.Check(s.set)
				installed, err := in.Apply(s.set)
				switch {
				case s.wantErr == "" && err != nil:
					t.Fatalf("step %d: %v", i, err)
				case s.wantErr != "" && (err == nil || reason(err) != s.wantErr):
					t.Fatalf("step %d: error %v (%s), want %s", i, err, reason(err), s.wantErr)
				}
				if (checkErr == nil) != (s.wantErr == "") {
					t.Errorf("step %d: Check = %v, Apply = %v", i, checkErr, err)
				}
				if got := e.files(root); !maps.Equal(got, s.wantFiles) {
					t.Errorf("step %d: files %v, want %v", i, got, s.wantFiles)
				}
				var names []string
				for _, p := range installed {
					names = append(names, p.Name)
					if p.Path != filepath.Join(in.Root, p.Name) || p.SHA256 != Hash([]byte(e.files(root)[p.Name])) {
						t.Errorf("step %d: installed %+v does not match the file", i, p)
					}
				}
				if !slices.Equal(names, s.wantInstalled) {
					t.Errorf("step %d: installed %v, want %v", i, names, s.wantInstalled)
				}
				if m, err := in.Installed(); err != nil || len(m) != len(installed) {
					t.Errorf("step %d: manifest %v, %v; Apply reported %v", i, m, err, installed)
				}
				if s.check != nil {
					s.check(t, installed, err)
				}
			}
			if got := e.files("kubelet"); len(tt.steps) > 1 && tt.steps[len(tt.steps)-1].root == "srv" && len(got) != 0 {
				t.Errorf("files left under the old root: %v", got)
			}
		})
	}
}

// crash is what an injected crash panics with.
type crash string

// TestApplyCrashSafety interrupts Apply at each of its steps, going from
// one set of profiles to another: at every point each profile file holds
// the old or the new content whole, the foreign file is untouched, and the
// next Apply finishes the change with no staged file left behind.
func TestApplyCrashSafety(t *testing.T) {
	from := map[string]string{"a.json": allow, "b.json": deny, "gone.json": allow}
	to := map[string]string{"a.json": deny, "b.json": deny, "new/c.json": allow}
	var steps []string
	{
		e := newEnv(t)
		in := e.installer("kubelet")
		if _, err := in.Apply(from); err != nil {
			t.Fatal(err)
		}
		in.crashPoint = func(s string) { steps = append(steps, s) }
		if _, err := in.Apply(to); err != nil {
			t.Fatal(err)
		}
	}
	if len(steps) < 6 {
		t.Fatalf("steps %v", steps)
	}
	for _, at := range steps {
		t.Run(at, func(t *testing.T) {
			e := newEnv(t)
			e.write("kubelet/seccomp/foreign.json", "theirs")
			in := e.installer("kubelet")
			if _, err := in.Apply(from); err != nil {
				t.Fatal(err)
			}
			in.crashPoint = func(s string) {
				if s == at {
					panic(crash(s))
				}
			}
			func() {
				defer func() {
					if r := recover(); r != nil && r != crash(at) {
						panic(r)
					}
				}()
				in.Apply(to)
				t.Fatalf("no crash at %s", at)
			}()
			for name, content := range e.files("kubelet") {
				ok := content == from[name] || content == to[name] || (name == "foreign.json" && content == "theirs")
				if base := filepath.Base(name); strings.HasPrefix(base, ".") {
					// A staged file: the new content whole, or atomicfile's
					// temporary file of it.
					target := strings.TrimSuffix(strings.TrimPrefix(base, "."), ".nodeshim-staged")
					ok = content == to[filepath.ToSlash(filepath.Join(filepath.Dir(name), target))] || strings.Contains(base, ".tmp-")
				}
				if !ok {
					t.Errorf("after a crash at %s: %s holds %q", at, name, content)
				}
			}
			in.crashPoint = nil
			installed, err := in.Apply(to)
			if err != nil {
				t.Fatal(err)
			}
			want := maps.Clone(to)
			want["foreign.json"] = "theirs"
			if got := e.files("kubelet"); !maps.Equal(got, want) {
				t.Errorf("after recovery: files %v, want %v", got, want)
			}
			if len(installed) != len(to) {
				t.Errorf("after recovery: installed %v", installed)
			}
		})
	}
}

func TestCorruptManifestTouchesNothing(t *testing.T) {
	e := newEnv(t)
	in := e.installer("kubelet")
	if _, err := in.Apply(map[string]string{"a.json": allow}); err != nil {
		t.Fatal(err)
	}
	e.write("state/"+ManifestFile, `{"profiles":[{"name":"a.json","path":"relative/a.json","sha256":"x"}]}`)
	_, err := in.Apply(nil)
	if !errors.Is(err, ErrManifest) || reason(err) != ReasonInstallFailed {
		t.Fatalf("Apply with a corrupt manifest = %v", err)
	}
	if got := e.files("kubelet"); got["a.json"] != allow {
		t.Errorf("files %v after a corrupt manifest", got)
	}
}
