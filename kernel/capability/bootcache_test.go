package capability

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// bootCacheFixture is a cache directory and a boot id file.
type bootCacheFixture struct {
	dir, bootID string
}

func newBootCacheFixture(t *testing.T) bootCacheFixture {
	t.Helper()
	d := t.TempDir()
	fx := bootCacheFixture{dir: filepath.Join(d, "cache"), bootID: filepath.Join(d, "boot_id")}
	fx.setBoot(t, "boot-1")
	return fx
}

func (fx bootCacheFixture) setBoot(t *testing.T, id string) {
	t.Helper()
	if err := os.WriteFile(fx.bootID, []byte(id+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (fx bootCacheFixture) cache(binary string) *BootCache {
	at := time.Date(2026, 11, 25, 20, 0, 0, 0, time.UTC)
	return &BootCache{Dir: fx.dir, BootIDPath: fx.bootID, Binary: binary, Now: func() time.Time { return at }}
}

// countingReqs are one PerBoot and one ordinary requirement whose probes
// count their calls and answer v.
func countingReqs(calls map[string]int, v Verdict) []Requirement {
	probe := func(id string) func(context.Context, Host) Finding {
		return func(context.Context, Host) Finding {
			calls[id]++
			return Findingf(v, "%s probed live", id)
		}
	}
	return []Requirement{
		{ID: "x.per-boot", Group: "x", Probe: probe("x.per-boot"), PerBoot: true},
		{ID: "x.always", Group: "x", Probe: probe("x.always")},
	}
}

// runCached runs the probes of c.Wrap(reqs) and saves the cache.
func runCached(t *testing.T, c *BootCache, reqs []Requirement) map[string]Finding {
	t.Helper()
	out := map[string]Finding{}
	for _, r := range c.Wrap(reqs) {
		out[r.ID] = r.Probe(t.Context(), nil)
	}
	if _, err := c.Save(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBootCache(t *testing.T) {
	for _, tc := range []struct {
		name string
		// between runs the first and the second run
		between    func(t *testing.T, fx bootCacheFixture)
		binary2    string
		scope2     string
		verdict    Verdict
		wantCached bool
	}{
		{name: "same boot and binary", verdict: Supported, wantCached: true},
		{name: "degraded is kept", verdict: Degraded, wantCached: true},
		{name: "unsupported is kept", verdict: Unsupported, wantCached: true},
		{name: "unknown is never kept", verdict: Unknown},
		{name: "another boot", verdict: Supported, between: func(t *testing.T, fx bootCacheFixture) { fx.setBoot(t, "boot-2") }},
		{name: "another binary", verdict: Supported, binary2: "bin-2"},
		{name: "another scope", verdict: Supported, scope2: "proc=/host/proc"},
		{name: "corrupt file", verdict: Supported, between: func(t *testing.T, fx bootCacheFixture) {
			if err := os.WriteFile(filepath.Join(fx.dir, BootCacheFile), []byte(`{"key": `), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "file removed", verdict: Supported, between: func(t *testing.T, fx bootCacheFixture) {
			if err := os.Remove(filepath.Join(fx.dir, BootCacheFile)); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newBootCacheFixture(t)
			calls := map[string]int{}
			first := runCached(t, fx.cache("bin-1"), countingReqs(calls, tc.verdict))
			if strings.Contains(first["x.per-boot"].Evidence, "cached") {
				t.Fatalf("first run answered from the cache: %+v", first)
			}
			if tc.between != nil {
				tc.between(t, fx)
			}
			bin := "bin-1"
			if tc.binary2 != "" {
				bin = tc.binary2
			}
			c := fx.cache(bin)
			c.Scope = tc.scope2
			second := runCached(t, c, countingReqs(calls, tc.verdict))
			if calls["x.always"] != 2 {
				t.Errorf("the ordinary probe ran %d times, want 2", calls["x.always"])
			}
			f := second["x.per-boot"]
			if f.Verdict != tc.verdict {
				t.Errorf("verdict %s, want %s", f.Verdict, tc.verdict)
			}
			want := 2
			if tc.wantCached {
				want = 1
				if !strings.Contains(f.Evidence, "x.per-boot probed live (cached: probed at 2026-11-25T20:00:00Z in this boot by this binary)") {
					t.Errorf("cached evidence %q does not say it is cached", f.Evidence)
				}
			} else if strings.Contains(f.Evidence, "cached") {
				t.Errorf("evidence %q claims a cache that must not be used", f.Evidence)
			}
			if calls["x.per-boot"] != want {
				t.Errorf("the per-boot probe ran %d times, want %d", calls["x.per-boot"], want)
			}
		})
	}
}

func TestBootCacheWritesPrivately(t *testing.T) {
	fx := newBootCacheFixture(t)
	runCached(t, fx.cache("bin-1"), countingReqs(map[string]int{}, Supported))
	for p, want := range map[string]os.FileMode{fx.dir: 0o700 | os.ModeDir, filepath.Join(fx.dir, BootCacheFile): 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s has mode %v, want %v", p, fi.Mode(), want)
		}
	}
	// A run that probed nothing afresh does not rewrite the file.
	c := fx.cache("bin-1")
	c.Wrap(countingReqs(map[string]int{}, Supported))[0].Probe(t.Context(), nil)
	if wrote, err := c.Save(); err != nil || wrote {
		t.Errorf("Save after a full hit = %v, %v; want false, nil", wrote, err)
	}
}

func TestBootCacheWithoutBootID(t *testing.T) {
	fx := newBootCacheFixture(t)
	c := fx.cache("bin-1")
	c.BootIDPath = filepath.Join(t.TempDir(), "missing")
	calls := map[string]int{}
	for range 2 {
		for _, r := range c.Wrap(countingReqs(calls, Supported)) {
			r.Probe(t.Context(), nil)
		}
	}
	if calls["x.per-boot"] != 2 {
		t.Errorf("without a boot id the probe ran %d times, want 2", calls["x.per-boot"])
	}
	if _, err := c.Save(); err == nil {
		t.Error("Save without a boot id succeeded")
	}
}

func TestNilBootCache(t *testing.T) {
	var c *BootCache
	reqs := countingReqs(map[string]int{}, Supported)
	if got := c.Wrap(reqs); &got[0] != &reqs[0] {
		t.Error("a nil cache changed the requirements")
	}
	if wrote, err := c.Save(); wrote || err != nil {
		t.Errorf("nil Save = %v, %v", wrote, err)
	}
}

func TestExecutableDigest(t *testing.T) {
	d, err := ExecutableDigest()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(d, "go-build-id=") || !strings.Contains(d, " ino=") {
		t.Errorf("digest of the test binary %q has no Go build ID or no inode", d)
	}
	if d2, _ := ExecutableDigest(); d2 != d {
		t.Errorf("digest changed between calls: %q, %q", d, d2)
	}
}

// goNote builds a .note.go.buildid section.
func goNote(name string, typ uint32, desc string) []byte {
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, uint32(len(name)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(desc)))
	b = binary.LittleEndian.AppendUint32(b, typ)
	b = append(b, name...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return append(b, desc...)
}

func TestGoBuildID(t *testing.T) {
	for _, tc := range []struct {
		name string
		note []byte
		want string
	}{
		{"go note", goNote("Go\x00\x00", 4, "abc/def"), "abc/def"},
		{"other type", goNote("Go\x00\x00", 3, "abc/def"), ""},
		{"other name", goNote("GNU\x00", 4, "abc/def"), ""},
		{"truncated", goNote("Go\x00\x00", 4, "abc/def")[:18], ""},
		{"empty", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := goBuildID(tc.note); got != tc.want {
				t.Errorf("goBuildID = %q, want %q", got, tc.want)
			}
		})
	}
}

func FuzzGoBuildID(f *testing.F) {
	f.Add(goNote("Go\x00\x00", 4, "abc/def"))
	f.Add([]byte{4, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f, 4, 0, 0, 0, 'G', 'o', 0, 0})
	f.Fuzz(func(t *testing.T, note []byte) {
		goBuildID(note)
	})
}
