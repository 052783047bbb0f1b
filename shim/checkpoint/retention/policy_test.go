package retention

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// arch is an archive of container c taken min minutes after t0.
func arch(c string, min int, size int64) Archive {
	at := t0.Add(time.Duration(min) * time.Minute)
	return Archive{Name: "checkpoint-" + c + "-" + at.Format(time.RFC3339) + ".tar", Container: c, Time: at, Size: size}
}

func TestPlan(t *testing.T) {
	a1, a2, a3 := arch("web_default-app", 1, 100), arch("web_default-app", 2, 100), arch("web_default-app", 3, 100)
	b1, b2 := arch("db_prod-pg", 0, 500), arch("db_prod-pg", 4, 500)
	all := []Archive{a3, b2, a1, b1, a2} // listing order must not matter
	now := t0.Add(10 * time.Minute)
	tests := []struct {
		name    string
		p       Policy
		reserve int64
		busy    []string
		want    []string // names removed, in order
		reasons []string
		kept    int64
	}{
		{"no limits", Policy{}, 0, nil, nil, nil, 1300},
		{"count keeps the newest", Policy{MaxPerContainer: 1}, 0, nil,
			[]string{b1.Name, a1.Name, a2.Name}, []string{ReasonMaxPerContainer, ReasonMaxPerContainer, ReasonMaxPerContainer}, 600},
		{"count within limit", Policy{MaxPerContainer: 3}, 0, nil, nil, nil, 1300},
		{"age", Policy{MaxAge: 8 * time.Minute}, 0, nil,
			[]string{b1.Name, a1.Name}, []string{ReasonMaxAge, ReasonMaxAge}, 700},
		{"bytes oldest first across containers", Policy{MaxBytes: 700}, 0, nil,
			[]string{b1.Name, a1.Name}, []string{ReasonMaxBytes, ReasonMaxBytes}, 700},
		{"bytes with a reserve", Policy{MaxBytes: 700}, 200, nil,
			[]string{b1.Name, a1.Name, a2.Name, a3.Name}, []string{ReasonMaxBytes, ReasonMaxBytes, ReasonMaxBytes, ReasonMaxBytes}, 500},
		{"age then count then bytes", Policy{MaxAge: 9*time.Minute + 30*time.Second, MaxPerContainer: 1, MaxBytes: 500}, 0, nil,
			[]string{b1.Name, a1.Name, a2.Name, a3.Name}, []string{ReasonMaxAge, ReasonMaxPerContainer, ReasonMaxPerContainer, ReasonMaxBytes}, 500},
		{"busy kept but counted", Policy{MaxPerContainer: 1}, 0, []string{a1.Name},
			[]string{b1.Name, a2.Name}, []string{ReasonMaxPerContainer, ReasonMaxPerContainer}, 700},
		{"busy kept under bytes", Policy{MaxBytes: 300}, 0, []string{b1.Name},
			[]string{a1.Name, a2.Name, a3.Name, b2.Name}, []string{ReasonMaxBytes, ReasonMaxBytes, ReasonMaxBytes, ReasonMaxBytes}, 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			busy := func(a Archive) bool { return slices.Contains(tt.busy, a.Name) }
			got, kept := Plan(tt.p, all, now, tt.reserve, busy)
			var names, reasons []string
			for _, r := range got {
				names, reasons = append(names, r.Name), append(reasons, r.Reason)
			}
			if !slices.Equal(names, tt.want) || !slices.Equal(reasons, tt.reasons) {
				t.Errorf("removed %v %v, want %v %v", names, reasons, tt.want, tt.reasons)
			}
			if kept != tt.kept {
				t.Errorf("kept %d bytes, want %d", kept, tt.kept)
			}
		})
	}
}

func TestPlanOrdersTiesByAttempt(t *testing.T) {
	a := Archive{Name: "checkpoint-p_n-c-2026-11-23T12:00:00Z.tar", Container: "p_n-c", Time: t0}
	b := Archive{Name: "checkpoint-p_n-c-2026-11-23T12:00:00Z-2.tar", Container: "p_n-c", Time: t0, Attempt: 2}
	c := Archive{Name: "checkpoint-p_n-c-2026-11-23T12:00:00Z-10.tar", Container: "p_n-c", Time: t0, Attempt: 10}
	got, _ := Plan(Policy{MaxPerContainer: 1}, []Archive{c, b, a}, t0, 0, nil)
	if len(got) != 2 || got[0].Name != a.Name || got[1].Name != b.Name {
		t.Errorf("removed %+v, want %s then %s", got, a.Name, b.Name)
	}
}

func TestParseName(t *testing.T) {
	tests := []struct {
		name      string
		container string
		attempt   int
		ok        bool
	}{
		{"checkpoint-web-0_default-app-2026-11-23T12:00:00Z.tar", "web-0_default-app", 0, true},
		{"checkpoint-web-0_kube-system-my-app-2026-11-23T12:00:00Z-3.tar", "web-0_kube-system-my-app", 3, true},
		{"checkpoint-coredns.x_ns-c-2026-11-23T12:00:00Z.tar", "coredns.x_ns-c", 0, true},
		{"checkpoint-web_default-app-2026-11-23T12:00:00+01:00.tar", "", 0, false},
		{"checkpoint-web_default-app.tar", "", 0, false},
		{".nodeshim-tmp-42-x.tar", "", 0, false},
		{"checkpoint-nounderscore-2026-11-23T12:00:00Z.tar", "", 0, false},
		{"checkpoint-web_default-app-2026-13-23T12:00:00Z.tar", "", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, at, attempt, ok := ParseName(tt.name)
			if ok != tt.ok || c != tt.container || attempt != tt.attempt {
				t.Errorf("ParseName = %q %v %d %v, want %q %d %v", c, at, attempt, ok, tt.container, tt.attempt, tt.ok)
			}
			if ok && !at.Equal(t0) {
				t.Errorf("time %v, want %v", at, t0)
			}
		})
	}
}

func FuzzParseName(f *testing.F) {
	f.Add("checkpoint-web-0_default-app-2026-11-23T12:00:00Z-3.tar")
	f.Add("checkpoint-a_b-c-2026-11-23T12:00:00Z.tar")
	f.Fuzz(func(t *testing.T, name string) {
		c, at, attempt, ok := ParseName(name)
		if !ok {
			return
		}
		if c == "" || attempt < 0 || at.IsZero() {
			t.Errorf("ParseName(%q) = %q %v %d", name, c, at, attempt)
		}
	})
}

func TestSummarize(t *testing.T) {
	got := Summarize([]Archive{arch("b", 3, 1), arch("a", 2, 10), arch("b", 1, 5), arch("a", 5, 20)})
	want := []Summary{
		{Container: "a", Count: 2, Bytes: 30, Oldest: arch("a", 2, 0).Name, OldestTime: t0.Add(2 * time.Minute)},
		{Container: "b", Count: 2, Bytes: 6, Oldest: arch("b", 1, 0).Name, OldestTime: t0.Add(time.Minute)},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Summarize = %+v\nwant %+v", got, want)
	}
}

// TestPlanOrdersOneSecondByModification: a removal frees a name that the
// next checkpoint of the same second takes again; the file's time, not
// the name's suffix, says it is the newest.
func TestPlanOrdersOneSecondByModification(t *testing.T) {
	reused := Archive{Name: "checkpoint-p_n-c-2026-11-23T12:00:00Z.tar", Container: "p_n-c", Time: t0, Modified: t0.Add(900 * time.Millisecond)}
	first := Archive{Name: "checkpoint-p_n-c-2026-11-23T12:00:00Z-1.tar", Container: "p_n-c", Time: t0, Modified: t0.Add(100 * time.Millisecond), Attempt: 1}
	got, _ := Plan(Policy{MaxPerContainer: 1}, []Archive{reused, first}, t0, 0, nil)
	if len(got) != 1 || got[0].Name != first.Name {
		t.Errorf("removed %+v, want %s", got, first.Name)
	}
}

// TestImportsNothingAbove: retention, below the checkpoint service, the
// CLI and the daemon, imports none of nodeshim's packages but internal
// ones and criu/workentry (the work entries it lists, which criu makes):
// its callers convert their configuration into a Policy.
func TestImportsNothingAbove(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(p, "github.com/nodeshim/nodeshim/") && !strings.HasPrefix(p, "github.com/nodeshim/nodeshim/internal/") && p != "github.com/nodeshim/nodeshim/criu/workentry" {
				t.Errorf("%s imports %s", name, p)
			}
		}
	}
}
