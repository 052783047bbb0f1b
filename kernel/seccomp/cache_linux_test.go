package seccomp

import (
	"errors"
	"os"
	"sync"
	"testing"
)

func TestCache(t *testing.T) {
	data, err := os.ReadFile("testdata/runtime-default.json")
	if err != nil {
		t.Fatal(err)
	}
	c := NewCache(2)
	// A thousand containers with the same profile at once: one compile.
	var wg sync.WaitGroup
	filters := make([]*Filter, 1000)
	for i := range filters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := c.Get(data, ParseOptions{}, CompileOptions{})
			if err != nil {
				t.Error(err)
			}
			filters[i] = f
		}()
	}
	wg.Wait()
	for _, f := range filters {
		if f != filters[0] {
			t.Fatal("different filters for the same profile")
		}
	}
	if s := c.Stats(); s.Misses != 1 || s.Hits != 999 || s.Entries != 1 {
		t.Errorf("stats %+v", s)
	}
	if filters[0].Hash != Key(data, ParseOptions{}, CompileOptions{}) || len(filters[0].Hash) != 64 {
		t.Errorf("hash %q", filters[0].Hash)
	}

	// Other options, other entries; the oldest is evicted beyond 2.
	lin, err := c.Get(data, ParseOptions{}, CompileOptions{Optimize: OptimizeLinear})
	if err != nil || lin == filters[0] || lin.Optimize != OptimizeLinear {
		t.Fatalf("linear: %v", err)
	}
	if _, err := c.Get(data, ParseOptions{Caps: []string{"CAP_SYS_ADMIN"}}, CompileOptions{}); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.Entries != 2 || s.Evictions != 1 || s.Misses != 3 {
		t.Errorf("stats %+v", s)
	}

	// A failing profile fails again from the cache.
	bad := []byte(`{"defaultAction":"SCMP_ACT_FROB"}`)
	for i := 0; i < 2; i++ {
		if _, err := c.Get(bad, ParseOptions{}, CompileOptions{}); !errors.Is(err, ErrUnknownAction) {
			t.Errorf("attempt %d: %v", i, err)
		}
	}
}

func TestKeyDependsOnEverything(t *testing.T) {
	data := []byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`)
	base := Key(data, ParseOptions{}, CompileOptions{})
	variants := map[string]string{
		"data":     Key([]byte(`{"defaultAction":"SCMP_ACT_LOG"}`), ParseOptions{}, CompileOptions{}),
		"arch":     Key(data, ParseOptions{Arch: "arm64"}, CompileOptions{}),
		"caps":     Key(data, ParseOptions{Caps: []string{}}, CompileOptions{}),
		"optimize": Key(data, ParseOptions{}, CompileOptions{Optimize: OptimizeTree}),
		"enosys":   Key(data, ParseOptions{}, CompileOptions{NoENOSYS: true}),
	}
	for name, k := range variants {
		if k == base {
			t.Errorf("%s does not change the key", name)
		}
	}
	if Key(data, ParseOptions{Caps: []string{"B", "A"}}, CompileOptions{}) != Key(data, ParseOptions{Caps: []string{"A", "B"}}, CompileOptions{}) {
		t.Error("caps order changes the key")
	}
}
