package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// resolved runs nodeshim with args up to the point where the command
// would do its work, and returns the values its flags then hold, with what
// it printed on stderr. The command's own RunE does not run.
func resolved(t *testing.T, args ...string) (map[string]string, string, error) {
	t.Helper()
	root := newRootCommand()
	target, _, err := root.Find(args)
	if err != nil {
		t.Fatalf("find %v: %v", args, err)
	}
	vals := map[string]string{}
	target.RunE = func(cmd *cobra.Command, _ []string) error {
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if !f.Hidden {
				vals[f.Name] = f.Value.String()
			}
		})
		return nil
	}
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err = root.Execute()
	if out.Len() > 0 {
		t.Errorf("stdout %q: warnings go to stderr", out.String())
	}
	return vals, errOut.String(), err
}

// TestDeprecatedSpellings: the spellings of flags from before -o/--output
// was the output format on every command still work, each with one line
// on stderr; the current spellings print nothing.
func TestDeprecatedSpellings(t *testing.T) {
	const (
		compileFile = "Flag -o/--output FILE has been deprecated, use --out-file FILE (-o/--output is the output format: table, json or yaml)\n"
		formatFlag  = "Flag --format has been deprecated, use -o/--output\n"
	)
	cases := []struct {
		name     string
		args     []string
		want     map[string]string // flag → value the command sees
		wantWarn string
		wantErr  string
	}{
		{"compile -o FILE", []string{"seccomp", "compile", "p.json", "-o", "f.bpf"},
			map[string]string{"out-file": "f.bpf", "output": "table"}, compileFile, ""},
		{"compile --output FILE --format json", []string{"seccomp", "compile", "p.json", "--output", "f.bpf", "--format", "json"},
			map[string]string{"out-file": "f.bpf", "output": "json"}, formatFlag + compileFile, ""},
		{"compile --format yaml", []string{"seccomp", "compile", "p.json", "--format", "yaml"},
			map[string]string{"out-file": "", "output": "yaml"}, formatFlag, ""},
		{"compile --out-file -o json", []string{"seccomp", "compile", "p.json", "--out-file", "f.bpf", "-o", "json"},
			map[string]string{"out-file": "f.bpf", "output": "json"}, "", ""},
		{"compile -o FILE twice", []string{"seccomp", "compile", "p.json", "--out-file", "a.bpf", "-o", "b.bpf"},
			nil, compileFile, "the file is given twice, as --out-file a.bpf and -o/--output b.bpf"},
		{"compile -o FILE, the same file again", []string{"seccomp", "compile", "p.json", "--out-file", "a.bpf", "-o", "a.bpf"},
			map[string]string{"out-file": "a.bpf"}, compileFile, ""},
		{"image --output FILE -o json", []string{"checkpoint", "image", "a.tar", "--tag", "x:1", "--output", "x.tar", "-o", "json"},
			map[string]string{"out-file": "x.tar", "output": "json", "tag": "x:1"}, compileFile, ""},
		{"image --output FILE --format yaml", []string{"checkpoint", "image", "a.tar", "--tag", "x:1", "--output", "x.tar", "--format", "yaml"},
			map[string]string{"out-file": "x.tar", "output": "yaml"}, formatFlag + compileFile, ""},
		{"image --out-file -o yaml", []string{"checkpoint", "image", "a.tar", "--tag", "x:1", "--out-file", "x.tar", "-o", "yaml"},
			map[string]string{"out-file": "x.tar", "output": "yaml"}, "", ""},
		{"record -o PROFILE", []string{"seccomp", "record", "-o", "p.json", "--pid", "1"},
			map[string]string{"out-file": "p.json"}, "Flag -o/--output has been deprecated, use --out-file\n", ""},
		{"record --output PROFILE", []string{"seccomp", "record", "--output", "p.json", "--pid", "1"},
			map[string]string{"out-file": "p.json"}, "Flag -o/--output has been deprecated, use --out-file\n", ""},
		{"record --out-file", []string{"seccomp", "record", "--out-file", "p.json", "--pid", "1"},
			map[string]string{"out-file": "p.json"}, "", ""},
		{"checkpoint --image-output", []string{"checkpoint", "--pid", "1", "--image", "x:1", "--image-output", "x.tar", "-o", "json"},
			map[string]string{"image-file": "x.tar", "output": "json"}, "Flag --image-output has been deprecated, use --image-file\n", ""},
		{"checkpoint --image-file", []string{"checkpoint", "--pid", "1", "--image", "x:1", "--image-file", "x.tar"},
			map[string]string{"image-file": "x.tar", "output": "table"}, "", ""},
		{"pressure --kubelet-root", []string{"pressure", "--kubelet-root", "/srv/kubelet", "-o", "json"},
			map[string]string{"kubelet-root-dir": "/srv/kubelet", "output": "json"}, "Flag --kubelet-root has been deprecated, use --kubelet-root-dir\n", ""},
		{"pressure -o yaml", []string{"pressure", "-o", "yaml"},
			map[string]string{"kubelet-root-dir": "/var/lib/kubelet", "output": "yaml"}, "", ""},
		{"prune defaults to checkpoint's directory", []string{"checkpoint", "prune", "--dry-run"},
			map[string]string{"root-dir": "/var/lib/kubelet", "dir": ""}, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, stderr, err := resolved(t, tc.args...)
			if tc.wantErr != "" {
				var ee *exitError
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.As(err, &ee) || ee.code != exitUsage {
					t.Fatalf("error %v, want a usage error saying %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if stderr != tc.wantWarn {
				t.Errorf("stderr %q, want %q", stderr, tc.wantWarn)
			}
			for name, want := range tc.want {
				if got[name] != want {
					t.Errorf("--%s = %q, want %q", name, got[name], want)
				}
			}
		})
	}
}

// TestDeprecatedCompileOutputWritesTheFile runs seccomp compile for real
// with its older spellings: the program goes to the file, the summary to
// stdout in the format given by --format, the warnings to stderr.
func TestDeprecatedCompileOutputWritesTheFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "filter.bpf")
	profile := filepath.Join(seccompTestdata, "deny-mkdir.json")
	stdout, stderr, err := runSplit(t, "seccomp", "compile", profile, "-o", file, "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var sum compileSummary
	if err := json.Unmarshal([]byte(stdout), &sum); err != nil {
		t.Fatalf("stdout is not the JSON summary: %v\n%s", err, stdout)
	}
	fi, err := os.Stat(file)
	if err != nil || sum.Output != file || fi.Size() != int64(sum.Filter.Instructions)*8 {
		t.Errorf("summary %+v, file %v (%v): want the program of %d instructions in %s", sum, fi, err, sum.Filter.Instructions, file)
	}
	if n := strings.Count(stderr, "has been deprecated"); n != 2 || strings.Count(stderr, "\n") != 2 {
		t.Errorf("stderr %q, want one line for -o FILE and one for --format", stderr)
	}
}

// TestOutputFlagEverywhere: on every command, -o/--output is the output
// format (table, json or yaml, table by default), no visible flag is
// named after an output but a file's --out-file or --image-file, and the
// help shows no deprecated spelling.
func TestOutputFlagEverywhere(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		t.Run(c.CommandPath(), func(t *testing.T) {
			c.Flags().VisitAll(func(f *pflag.Flag) {
				if f.Hidden {
					if len(f.Annotations[deprecatedAnnotation]) == 0 {
						t.Errorf("hidden flag --%s is not a deprecated spelling", f.Name)
					}
					return
				}
				switch {
				case f.Name == "output":
					if f.Shorthand != "o" || f.Usage != outputUsage || f.DefValue != "table" {
						t.Errorf("-%s/--output %q (default %q), want -o/--output %q (default table)", f.Shorthand, f.Usage, f.DefValue, outputUsage)
					}
				case f.Shorthand == "o":
					t.Errorf("-o is --%s, want --output", f.Name)
				case f.Name == "format" || strings.HasSuffix(f.Name, "-output"):
					t.Errorf("visible flag --%s: -o/--output is the format, --out-file a file", f.Name)
				}
			})
			var help bytes.Buffer
			c.SetOut(&help)
			if err := c.Help(); err != nil {
				t.Fatal(err)
			}
			for _, old := range []string{"--format", "--image-output", "-o FILE", "-o PROFILE", "--output FILE", "--kubelet-root "} {
				if strings.Contains(help.String(), old) {
					t.Errorf("help mentions %q:\n%s", old, help.String())
				}
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCommand())
}

// TestHelpNamesTheFlags: the help of the commands that write files names
// their file flag beside -o/--output.
func TestHelpNamesTheFlags(t *testing.T) {
	cases := []struct {
		args    []string
		want    []string
		notWant []string
	}{
		{[]string{"seccomp", "compile"}, []string{"--out-file string", "-o, --output string", "compile PROFILE [--out-file FILE]"}, nil},
		{[]string{"checkpoint", "image"}, []string{"--out-file string", "-o, --output string", "--tag REF --out-file FILE"}, nil},
		{[]string{"seccomp", "record"}, []string{"--out-file string", "record --out-file PROFILE"}, []string{"-o, --output"}},
		{[]string{"checkpoint"}, []string{"--image-file string", "-o, --output string", "--image-file /tmp/web.oci.tar"}, nil},
		{[]string{"checkpoint", "prune"}, []string{"--root-dir string", "<root-dir>/checkpoints", "-o, --output string"}, nil},
		{[]string{"pressure"}, []string{"--kubelet-root-dir string", "-o, --output string"}, nil},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			help, err := run(t, append(tc.args, "--help")...)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(help, w) {
					t.Errorf("help lacks %q:\n%s", w, help)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(help, w) {
					t.Errorf("help has %q:\n%s", w, help)
				}
			}
		})
	}
}

// TestExamplesParse: every nodeshim command line in an Example parses
// with the flags of its command, and uses no deprecated spelling.
func TestExamplesParse(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, line := range exampleLines(c.Example) {
			t.Run(line, func(t *testing.T) {
				args := strings.Fields(line)[1:]
				if i := slices.Index(args, "--"); i >= 0 {
					args = args[:i]
				}
				root := newRootCommand()
				target, rest, err := root.Find(args)
				if err != nil {
					t.Fatal(err)
				}
				if target.CommandPath() != c.CommandPath() {
					t.Fatalf("runs %q, in the examples of %q", target.CommandPath(), c.CommandPath())
				}
				if err := target.ParseFlags(rest); err != nil {
					t.Fatal(err)
				}
				target.Flags().Visit(func(f *pflag.Flag) {
					if len(f.Annotations[deprecatedAnnotation]) > 0 {
						t.Errorf("uses the deprecated --%s", f.Name)
					}
					if v, ok := f.Value.(*formatOrFile); ok && v.legacy != "" {
						t.Errorf("uses -o/--output %s for a file", v.legacy)
					}
				})
			})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCommand())
}

// exampleLines are the nodeshim command lines of an Example, with their
// continuation lines joined.
func exampleLines(example string) []string {
	var lines []string
	var cur string
	for _, l := range strings.Split(example, "\n") {
		l = strings.TrimSpace(l)
		if cur != "" {
			cur += " " + strings.TrimSuffix(l, "\\")
		} else if strings.HasPrefix(l, "nodeshim ") {
			cur = strings.TrimSuffix(l, "\\")
		}
		if cur != "" && !strings.HasSuffix(l, "\\") {
			lines = append(lines, cur)
			cur = ""
		}
	}
	return lines
}
