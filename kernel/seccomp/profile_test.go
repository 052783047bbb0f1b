package seccomp

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/testenv/golden"
)

// TestInvalidProfilesGolden checks the error of every profile under
// testdata/invalid against its .err golden file.
func TestInvalidProfilesGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no invalid profiles: %v", err)
	}
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".json")
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Parse(b, ParseOptions{})
			if err == nil {
				t.Fatalf("parsed: %+v", p)
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FieldError", err)
			}
			golden.Check(t, "invalid/"+name+".err", []byte(err.Error()+"\n"))
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name    string
		profile string
		path    string
		is      error
	}{
		{"unknown action", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["a"],"action":"X"}]}`, "syscalls[0].action", ErrUnknownAction},
		{"unknown default", `{"defaultAction":"ALLOW"}`, "defaultAction", ErrUnknownAction},
		{"unknown op", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["a"],"action":"SCMP_ACT_LOG"},{"names":["b"],"action":"SCMP_ACT_ERRNO","args":[{"index":1,"value":2,"op":"SCMP_CMP_X"}]}]}`, "syscalls[1].args[0].op", ErrUnknownOp},
		{"index 6", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["a"],"action":"SCMP_ACT_ERRNO","args":[{"index":0,"value":2,"op":"SCMP_CMP_EQ"},{"index":6,"value":2,"op":"SCMP_CMP_EQ"}]}]}`, "syscalls[0].args[1].index", ErrArgIndex},
		{"index negative", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["a"],"action":"SCMP_ACT_ERRNO","args":[{"index":-1,"value":2,"op":"SCMP_CMP_EQ"}]}]}`, "syscalls[0].args[0].index", ErrType},
		{"value too big", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["a"],"action":"SCMP_ACT_ERRNO","args":[{"index":0,"value":18446744073709551616,"op":"SCMP_CMP_EQ"}]}]}`, "syscalls[0].args[0].value", ErrType},
		{"notify default", `{"defaultAction":"SCMP_ACT_NOTIFY","listenerPath":"/x"}`, "defaultAction", ErrNotify},
		{"notify write", `{"defaultAction":"SCMP_ACT_ALLOW","listenerPath":"/x","syscalls":[{"names":["read","write"],"action":"SCMP_ACT_NOTIFY"}]}`, "syscalls[0].names[1]", ErrNotify},
		{"notify without listener", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["read"],"action":"SCMP_ACT_NOTIFY"}]}`, "listenerPath", ErrMissing},
		{"errnoRet with allow", `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["read"],"action":"SCMP_ACT_ALLOW","errnoRet":1}]}`, "syscalls[0].errnoRet", ErrErrnoRet},
		{"defaultErrnoRet with kill", `{"defaultAction":"SCMP_ACT_KILL","defaultErrnoRet":1}`, "defaultErrnoRet", ErrErrnoRet},
		{"errno above 4095", `{"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":4096}`, "defaultErrnoRet", ErrErrnoRet},
		{"unknown flag", `{"defaultAction":"SCMP_ACT_ALLOW","flags":["SECCOMP_FILTER_FLAG_LOG","SECCOMP_FILTER_FLAG_X"]}`, "flags[1]", ErrUnknownFlag},
		{"unknown arch", `{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_PDP11"]}`, "architectures[0]", ErrUnknownArch},
		{"conflict", `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["read"],"action":"SCMP_ACT_ALLOW"},{"names":["close","read"],"action":"SCMP_ACT_ERRNO","errnoRet":5}]}`, "syscalls[1].names[1]", ErrConflict},
		{"conflict same args reordered", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["socket"],"action":"SCMP_ACT_ERRNO","args":[{"index":0,"value":1,"op":"SCMP_CMP_EQ"},{"index":1,"value":2,"op":"SCMP_CMP_EQ"}]},{"names":["socket"],"action":"SCMP_ACT_KILL","args":[{"index":1,"value":2,"op":"SCMP_CMP_EQ"},{"index":0,"value":1,"op":"SCMP_CMP_EQ"}]}]}`, "syscalls[1].names[0]", ErrConflict},
		{"missing action", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["read"]}]}`, "syscalls[0].action", ErrMissing},
		{"missing names", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"action":"SCMP_ACT_LOG"}]}`, "syscalls[0].names", ErrMissing},
		{"names not strings", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":[1],"action":"SCMP_ACT_LOG"}]}`, "syscalls[0].names[0]", ErrType},
		{"syscalls not array", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":{}}`, "syscalls", ErrType},
		{"document not object", `[]`, "", ErrType},
		{"syntax", `{"defaultAction":`, "defaultAction", ErrSyntax},
		{"syntax at top", `{"defaultAction":"SCMP_ACT_ALLOW"`, "", ErrSyntax},
		{"syntax in names", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["read"],"action":"SCMP_ACT_LOG"},{"names":["read",],"action":"SCMP_ACT_LOG"}]}`, "syscalls[1].names[1]", ErrSyntax},
		{"syntax in args", "{\"defaultAction\":\"SCMP_ACT_ALLOW\",\"syscalls\":[{\"names\":[\"a\"],\"action\":\"SCMP_ACT_ERRNO\",\"args\":[{\"index\":0,\"value\":0x10}]}]}", "syscalls[0].args[0]", ErrSyntax},
		{"syntax after value", `[1,2}`, "[2]", ErrSyntax},
		{"trailing data", `{} x`, "", ErrSyntax},
		{"archMap and architectures", `{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86"],"archMap":[{"architecture":"SCMP_ARCH_X86_64"}]}`, "archMap", nil},
		{"bad minKernel", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["a"],"action":"SCMP_ACT_LOG","includes":{"minKernel":"four"}}]}`, "syscalls[0].includes.minKernel", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.profile), ParseOptions{})
			if err == nil {
				t.Fatal("no error")
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("%v is not a *FieldError", err)
			}
			if fe.Path != tc.path {
				t.Errorf("path %q, want %q (%v)", fe.Path, tc.path, err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("%v is not %v", err, tc.is)
			}
		})
	}
}

func TestParseOCI(t *testing.T) {
	p, err := Parse([]byte(`{
		"defaultAction": "SCMP_ACT_ERRNO",
		"defaultErrnoRet": 38,
		"architectures": ["SCMP_ARCH_X86_64"],
		"flags": ["SECCOMP_FILTER_FLAG_SPEC_ALLOW"],
		"listenerPath": "/run/agent.sock",
		"listenerMetadata": "meta",
		"syscalls": [
			{"names": ["read", "write"], "action": "SCMP_ACT_ALLOW"},
			{"names": ["openat"], "action": "SCMP_ACT_NOTIFY"},
			{"names": ["kill"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13, "args": [{"index": 1, "value": 9, "op": "SCMP_CMP_EQ"}]},
			{"names": ["read"], "action": "SCMP_ACT_ALLOW", "errnoret": 3}
		]
	}`), ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Shape != ShapeOCI || p.DefaultVerdict() != (Verdict{ActErrno, 38}) || p.ListenerPath != "/run/agent.sock" || len(p.Syscalls) != 4 {
		t.Errorf("got %+v", p)
	}
	if got := p.Syscalls[2].Args[0]; got != (Arg{Index: 1, Value: 9, Op: OpEqualTo}) {
		t.Errorf("arg %+v", got)
	}
	var warns []string
	for _, w := range p.Warnings {
		warns = append(warns, w.String())
	}
	want := []string{
		"syscalls[3].errnoret: unknown field, ignored",
		`syscalls[3].names[0]: "read" is listed again with the same rule (first at syscalls[0].names[0])`,
	}
	if strings.Join(warns, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(warns, "\n"), strings.Join(want, "\n"))
	}
}

func TestParseMoby(t *testing.T) {
	b, err := os.ReadFile("testdata/moby-shape.json")
	if err != nil {
		t.Fatal(err)
	}
	names := func(p *Profile) string {
		var out []string
		for _, s := range p.Syscalls {
			out = append(out, strings.Join(s.Names, "+"))
		}
		return strings.Join(out, " ")
	}
	tests := []struct {
		name   string
		opts   ParseOptions
		arches string
		rules  string
	}{
		{"amd64 default caps 6.18", ParseOptions{Arch: "amd64", Kernel: capability.V(6, 18, 44)},
			"SCMP_ARCH_X86_64,SCMP_ARCH_X86,SCMP_ARCH_X32",
			"read+write+close+exit_group+getpid+brk+mmap+munmap+rt_sigreturn+futex arch_prctl chown+fchown ptrace clone getuid"},
		{"arm64 with SYS_ADMIN", ParseOptions{Arch: "arm64", Caps: []string{"CAP_SYS_ADMIN"}, Kernel: capability.V(4, 4, 0)},
			"SCMP_ARCH_AARCH64,SCMP_ARCH_ARM",
			"read+write+close+exit_group+getpid+brk+mmap+munmap+rt_sigreturn+futex mount+umount2+unshare getuid"},
		{"unknown kernel", ParseOptions{Arch: "amd64", Caps: []string{}},
			"SCMP_ARCH_X86_64,SCMP_ARCH_X86,SCMP_ARCH_X32",
			"read+write+close+exit_group+getpid+brk+mmap+munmap+rt_sigreturn+futex arch_prctl clone getuid"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse(b, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if p.Shape != ShapeMoby {
				t.Errorf("shape %s", p.Shape)
			}
			if got := strings.Join(p.Architectures, ","); got != tc.arches {
				t.Errorf("arches %s, want %s", got, tc.arches)
			}
			if got := names(p); got != tc.rules {
				t.Errorf("rules:\n%s\nwant:\n%s", got, tc.rules)
			}
			for _, w := range p.Warnings {
				if !strings.HasPrefix(w.Message, "not applied on this node: ") {
					t.Errorf("unexpected warning %s", w)
				}
			}
		})
	}
}

func TestEvaluate(t *testing.T) {
	b, err := os.ReadFile("testdata/runtime-default.json")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(b, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	allow := Verdict{Action: ActAllow}
	eperm := Verdict{Action: ActErrno, Errno: 1}
	tests := []struct {
		name    string
		syscall string
		args    [6]uint64
		want    Verdict
		rule    string
	}{
		{"read", "read", [6]uint64{}, allow, "syscalls[0]"},
		{"not listed", "acct", [6]uint64{}, eperm, "defaultAction"},
		{"personality 0", "personality", [6]uint64{0}, allow, "syscalls[1]"},
		{"personality query", "personality", [6]uint64{0xffffffff}, allow, "syscalls[5]"},
		{"personality other", "personality", [6]uint64{1}, eperm, "defaultAction"},
		{"clone plain", "clone", [6]uint64{0x11}, allow, "syscalls[6]"},
		{"clone newuser", "clone", [6]uint64{0x10000000}, eperm, "defaultAction"},
		{"clone3", "clone3", [6]uint64{}, Verdict{ActErrno, 38}, "syscalls[7]"},
		{"socket inet", "socket", [6]uint64{2}, allow, "syscalls[8]"},
		{"socket vsock", "socket", [6]uint64{40}, Verdict{ActErrno, 97}, "syscalls[9]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := p.Evaluate(tc.syscall, tc.args)
			if got.Verdict != tc.want || got.Rule != tc.rule || len(got.Candidates) != 0 {
				t.Errorf("got %+v, want %v at %s", got, tc.want, tc.rule)
			}
		})
	}
}

func TestEvaluateOverlap(t *testing.T) {
	p, err := Parse([]byte(`{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[
		{"names":["kill"],"action":"SCMP_ACT_ERRNO","args":[{"index":0,"value":1,"op":"SCMP_CMP_EQ"}]},
		{"names":["kill"],"action":"SCMP_ACT_KILL_PROCESS","args":[{"index":1,"value":9,"op":"SCMP_CMP_EQ"}]},
		{"names":["tkill"],"action":"SCMP_ACT_ERRNO","args":[{"index":0,"value":1,"op":"SCMP_CMP_EQ"},{"index":0,"value":2,"op":"SCMP_CMP_EQ"}]}]}`), ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := p.Evaluate("kill", [6]uint64{1, 9})
	if !got.Accepts(Verdict{Action: ActErrno, Errno: 1}) || !got.Accepts(Verdict{Action: ActKillProcess}) || got.Accepts(Verdict{Action: ActAllow}) {
		t.Errorf("overlap: %+v", got)
	}
	// Two comparisons of one argument are ORed (one rule each), as runc does.
	for _, a := range []uint64{1, 2} {
		if got := p.Evaluate("tkill", [6]uint64{a}); got.Verdict.Action != ActErrno {
			t.Errorf("tkill(%d): %+v", a, got)
		}
	}
	if got := p.Evaluate("tkill", [6]uint64{3}); got.Verdict.Action != ActAllow {
		t.Errorf("tkill(3): %+v", got)
	}
}

func TestOpMatch(t *testing.T) {
	tests := []struct {
		op         Op
		arg, v, v2 uint64
		want       bool
	}{
		{OpNotEqual, 1, 2, 0, true}, {OpNotEqual, 2, 2, 0, false},
		{OpLessThan, 1, 2, 0, true}, {OpLessThan, 2, 2, 0, false},
		{OpLessEqual, 2, 2, 0, true}, {OpLessEqual, 3, 2, 0, false},
		{OpEqualTo, 2, 2, 0, true}, {OpEqualTo, ^uint64(0), 0xffffffff, 0, false},
		{OpGreaterEqual, 2, 2, 0, true}, {OpGreaterEqual, 1, 2, 0, false},
		{OpGreaterThan, 3, 2, 0, true}, {OpGreaterThan, 2, 2, 0, false},
		{OpMaskedEqual, 0x11, 0x7e020000, 0, true}, {OpMaskedEqual, 0x10000011, 0x7e020000, 0, false},
		{Op("bogus"), 0, 0, 0, false},
	}
	for _, tc := range tests {
		if got := tc.op.Match(tc.arg, tc.v, tc.v2); got != tc.want {
			t.Errorf("%s(%#x, %#x, %#x) = %v", tc.op, tc.arg, tc.v, tc.v2, got)
		}
	}
}

func TestParseRelease(t *testing.T) {
	tests := []struct {
		in   string
		want capability.Version
		err  bool
	}{
		{"6.18.44-fc-v769", capability.V(6, 18, 44), false},
		{"5.15.0-91-generic", capability.V(5, 15, 0), false},
		{"6.1", capability.V(6, 1, 0), false},
		{"4.19.0+", capability.V(4, 19, 0), false},
		{"6.12.1.2", capability.V(6, 12, 1), false},
		{"linux", capability.Version{}, true},
		{"", capability.Version{}, true},
	}
	for _, tc := range tests {
		got, err := ParseRelease(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseRelease(%q) = %v, %v", tc.in, got, err)
		}
	}
}

// FuzzParse feeds arbitrary bytes to the profile parser: it must never
// panic, every error must be a *FieldError, and an accepted profile must
// evaluate every name it lists without panicking.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"testdata/*.json", "testdata/invalid/*.json"} {
		files, _ := filepath.Glob(dir)
		for _, path := range files {
			b, err := os.ReadFile(path)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Add([]byte(`{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"name":"x","action":"SCMP_ACT_LOG","includes":{"minKernel":"4.8","caps":["CAP_X"]}}]}`))
	f.Add([]byte(repeatedNames("getpid", 50, "SCMP_ACT_ALLOW")))
	f.Add([]byte(`{"defaultAction":"SCMP_ACT_ALLOW","x":` + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + `}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data, ParseOptions{Arch: "amd64", Kernel: capability.V(6, 1, 0)})
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FieldError", err)
			}
			return
		}
		if !p.DefaultAction.Valid() {
			t.Fatalf("accepted default action %q", p.DefaultAction)
		}
		for _, s := range p.Syscalls {
			if !s.Action.Valid() {
				t.Fatalf("accepted action %q", s.Action)
			}
			for _, a := range s.Args {
				if a.Index > 5 || !a.Op.Valid() {
					t.Fatalf("accepted arg %+v", a)
				}
			}
		}
		names := 0
		for _, s := range p.Syscalls {
			names += len(s.Names)
			if len(s.Args) > MaxArgs {
				t.Fatalf("accepted %d comparisons in a rule", len(s.Args))
			}
		}
		if len(data) > MaxProfileBytes || len(p.Syscalls) > MaxRules || names > MaxNames {
			t.Fatalf("accepted %d bytes, %d rules, %d names", len(data), len(p.Syscalls), names)
		}
		idx := ruleIndex(p)
		args := [6]uint64{1, 2, 3, 4, 5, 6}
		for _, n := range p.Names() {
			if got, want := p.evaluate(idx[n], args), p.Evaluate(n, args); got.Rule != want.Rule || !got.Accepts(want.Verdict) {
				t.Fatalf("%s: indexed %+v, scanned %+v", n, got, want)
			}
		}
	})
}

// FuzzSyntaxPath locates syntax errors in arbitrary bytes: it must never
// panic, and the path of a malformed profile is one Parse reports.
func FuzzSyntaxPath(f *testing.F) {
	f.Add([]byte(`{"syscalls":[{"names":["a",]}]}`))
	f.Add([]byte(`[[[[{"a":{"b":[1,2,`))
	f.Add([]byte(`}`))
	f.Add([]byte(`{"a" 1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := syntaxPath(data)
		if json.Valid(data) {
			return
		}
		_, err := Parse(data, ParseOptions{})
		var fe *FieldError
		if !errors.As(err, &fe) || !errors.Is(err, ErrSyntax) {
			t.Fatalf("Parse(%q) = %v, want a syntax *FieldError", data, err)
		}
		if fe.Path != path {
			t.Fatalf("Parse's path %q, syntaxPath %q", fe.Path, path)
		}
	})
}
