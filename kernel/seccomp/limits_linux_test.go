package seccomp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// repeatedNames is a profile whose one rule lists name n times.
func repeatedNames(name string, n int, action string) string {
	return `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":[` +
		strings.TrimSuffix(strings.Repeat(`"`+name+`",`, n), ",") + `],"action":"` + action + `"}]}`
}

// repeatedRules is a profile of n rules, each naming name once.
func repeatedRules(name string, n int) string {
	rule := `{"names":["` + name + `"],"action":"SCMP_ACT_ALLOW"}`
	return `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[` + strings.TrimSuffix(strings.Repeat(rule+",", n), ",") + `]}`
}

// TestRepeatedNamesAreLinear: a syscall repeated 100,000 times is parsed,
// compiled and explained as if it were named once: one warning with the
// count, one rule handed to libseccomp (the work that grew with the square
// of the repeats), one skipped name for an unknown one. The run has no
// time limit; what it checks is the work done.
func TestRepeatedNamesAreLinear(t *testing.T) {
	const n = 100_000
	for _, tc := range []struct {
		name, profile string
		rules         int
		skipped       string
	}{
		{"one rule, 100k names", repeatedNames("getpid", n, "SCMP_ACT_ALLOW"), 1, ""},
		{"16k rules, one name each", repeatedRules("getpid", MaxRules), 1, ""},
		{"unknown name 100k times", repeatedNames("nosys", n, "SCMP_ACT_ALLOW"), 0, "(and 99999 repeats)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.profile), ParseOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0].Message, "repeats in all") {
				t.Errorf("warnings: %d, first %v; want one with the count", len(p.Warnings), p.Warnings[:min(1, len(p.Warnings))])
			}
			f, err := Compile(p, CompileOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if f.Rules != tc.rules {
				t.Errorf("%d rules handed to libseccomp, want %d", f.Rules, tc.rules)
			}
			if tc.skipped != "" && (len(f.Skipped) != 1 || !strings.Contains(f.Skipped[0].Message, tc.skipped)) {
				t.Errorf("skipped: %v, want one warning with %q", f.Skipped, tc.skipped)
			}
			if tc.skipped == "" && len(f.Skipped) != 0 {
				t.Errorf("skipped: %v", f.Skipped)
			}
			ex, err := Explain(p, f)
			if err != nil {
				t.Fatal(err)
			}
			if ex.ByRule != tc.rules {
				t.Errorf("Explain: %d syscalls by rule, want %d", ex.ByRule, tc.rules)
			}
		})
	}
}

// TestRepeatedConflictReportedOnce: a syscall given another verdict
// 100,000 times is one error, not 100,000.
func TestRepeatedConflictReportedOnce(t *testing.T) {
	data := `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["getpid"],"action":"SCMP_ACT_ALLOW"},{"names":[` +
		strings.TrimSuffix(strings.Repeat(`"getpid",`, 100_000), ",") + `],"action":"SCMP_ACT_LOG"}]}`
	_, err := Parse([]byte(data), ParseOptions{})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("Parse = %v, want %v", err, ErrConflict)
	}
	if got := strings.Count(err.Error(), "conflicting rules"); got != 1 {
		t.Errorf("%d conflict errors, want 1", got)
	}
}

// TestLimits: a profile beyond a bound is refused by Parse (and LoadFile)
// with a *FieldError wrapping ErrLimit that names the bound; one at the
// bound is accepted.
func TestLimits(t *testing.T) {
	nested := func(depth int) string {
		return `{"defaultAction":"SCMP_ACT_ALLOW","comment":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`
	}
	args := func(n int) string {
		var cs []string
		for i := range n {
			cs = append(cs, fmt.Sprintf(`{"index":0,"value":%d,"op":"SCMP_CMP_EQ"}`, i))
		}
		return `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["kill"],"action":"SCMP_ACT_ERRNO","args":[` + strings.Join(cs, ",") + `]}]}`
	}
	big := `{"defaultAction":"SCMP_ACT_ALLOW","comment":"` + strings.Repeat("x", MaxProfileBytes) + `"}`
	tests := []struct {
		name, data string
		path, want string // want "" for accepted
	}{
		{"size", big, "", "more than the 1048576 of seccomp.MaxProfileBytes"},
		{"depth at the limit", nested(MaxDepth), "", ""},
		{"depth", nested(MaxDepth + 1), "", "nested more than 16 deep (seccomp.MaxDepth)"},
		{"depth inside a string does not count", `{"defaultAction":"SCMP_ACT_ALLOW","comment":"` + strings.Repeat("[{", 100) + `"}`, "", ""},
		{"rules", repeatedRules("getpid", MaxRules+1), "syscalls", "16385 rules, more than the 16384 of seccomp.MaxRules"},
		{"names", `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[` + strings.Repeat(`{"names":[`+strings.TrimSuffix(strings.Repeat(`"read",`, 1<<16), ",")+`],"action":"SCMP_ACT_ALLOW"},`, 2) +
			`{"names":["write"],"action":"SCMP_ACT_ALLOW"}]}`, "syscalls[2].names", "131073 syscall names up to here, more than the 131072 of seccomp.MaxNames"},
		{"comparisons", args(MaxArgs + 1), "syscalls[0].args", "4097 comparisons, more than the 4096 of seccomp.MaxArgs"},
	}
	dir := t.TempDir()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.data), ParseOptions{})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				return
			}
			var fe *FieldError
			if !errors.Is(err, ErrLimit) || !errors.As(err, &fe) || fe.Path != tc.path || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %.300v, want a FieldError at %q wrapping %v with %q", err, tc.path, ErrLimit, tc.want)
			}
			file := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".json")
			if err := os.WriteFile(file, []byte(tc.data), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, _, err := LoadFile(context.Background(), file, ParseOptions{}, CompileOptions{}); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), file) {
				t.Fatalf("LoadFile = %.300v, want %v naming %s", err, ErrLimit, file)
			}
		})
	}
}

// TestCompileCancelled: Compile gives up with the context's error.
func TestCompileCancelled(t *testing.T) {
	p := mustParse(t, repeatedNames("getpid", 10, "SCMP_ACT_ALLOW"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := CompileContext(ctx, p, CompileOptions{}); !errors.Is(err, context.Canceled) || !errors.Is(err, ErrCompile) {
		t.Fatalf("CompileContext = %v, want %v and %v", err, ErrCompile, context.Canceled)
	}
}

// TestMinInstructionsIsALowerBound: the bound Compile refuses with is
// never above the instructions libseccomp really emits for one
// architecture, for every profile of testdata and both layouts.
func TestMinInstructionsIsALowerBound(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("testdata: %v %v", files, err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		p, err := Parse(data, ParseOptions{})
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		p.Architectures = nil // native only: the bound is per architecture
		for _, opt := range []Optimize{OptimizeLinear, OptimizeTree} {
			f, err := Compile(p, CompileOptions{Optimize: opt, NoENOSYS: true, oneFilter: true})
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if f.lowerBound > f.Instructions {
				t.Errorf("%s %s: lower bound %d above the %d instructions emitted", file, opt, f.lowerBound, f.Instructions)
			}
		}
	}
}
