package dockerfile

import (
	"os"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestDockerfileBuilds reads the repository's Dockerfile as the node's
// image build (testenv/nodevm) and deploy's tests do: the static cgo build of nodeshim and the pure
// Go build of the reporter, stamped with the given version, and CRIU's
// programs and libraries.
func TestDockerfileBuilds(t *testing.T) {
	data, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"VERSION": "v9.9.9", "COMMIT": "abc"}
	for _, tt := range []struct {
		pkg, cgo string
		static   bool
	}{
		{"./cmd/nodeshim", "CGO_ENABLED=1", true},
		{"./cmd/nodeshim-reporter", "CGO_ENABLED=0", false},
	} {
		env, args, err := GoBuild(string(data), vars, tt.pkg)
		if err != nil {
			t.Fatalf("%s: %v", tt.pkg, err)
		}
		if !slices.Contains(env, tt.cgo) {
			t.Errorf("%s: environment %v, want %s", tt.pkg, env, tt.cgo)
		}
		if len(args) == 0 || args[len(args)-1] != tt.pkg || !slices.Contains(args, "-o") {
			t.Errorf("%s: go build %v: want -o and the package last", tt.pkg, args)
		}
		i := slices.Index(args, "-ldflags")
		if i < 0 || i+1 >= len(args) || !strings.Contains(args[i+1], "-X main.version=v9.9.9") {
			t.Fatalf("%s: go build %v: want -ldflags stamping the version", tt.pkg, args)
		}
		if got := strings.Contains(args[i+1], "-extldflags -static"); got != tt.static {
			t.Errorf("%s: -ldflags %q: static %v, want %v", tt.pkg, args[i+1], got, tt.static)
		}
	}
	if _, _, err := GoBuild(string(data), vars, "./cmd/none"); err == nil {
		t.Error("a package the Dockerfile does not build was found")
	}
	libs, err := Arg(string(data), "CRIU_LIBS")
	if err != nil || !slices.Contains(strings.Fields(libs), "libc.so.6") {
		t.Errorf("CRIU_LIBS %q, %v: want libc.so.6 among them", libs, err)
	}
	progs, err := Arg(string(data), "CRIU_PROGRAMS")
	if err != nil || !slices.Contains(strings.Fields(progs), "/usr/sbin/criu") {
		t.Errorf("CRIU_PROGRAMS %q, %v: want /usr/sbin/criu", progs, err)
	}
	if _, err := Arg(string(data), "NO_SUCH_ARG"); err == nil {
		t.Error("an ARG the Dockerfile lacks was found")
	}
}

func TestWords(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string
		bad  bool
	}{
		{in: "go build -o x", want: []string{"go", "build", "-o", "x"}},
		{in: `-ldflags "-s -w" ./cmd`, want: []string{"-ldflags", "-s -w", "./cmd"}},
		{in: `'a b'c "d"`, want: []string{"a bc", "d"}},
		{in: `-ldflags '-extldflags -static'`, want: []string{"-ldflags", "-extldflags -static"}},
		{in: `a "" b`, want: []string{"a", "", "b"}},
		{in: `-ldflags="-s -w"`, want: []string{"-ldflags=-s -w"}},
		{in: `""`, want: []string{""}},
		{in: "  \t ", want: nil},
		{in: `"open`, bad: true},
	} {
		got, err := Words(tt.in)
		if (err != nil) != tt.bad || !slices.Equal(got, tt.want) {
			t.Errorf("Words(%q) = %q, %v; want %q (error %v)", tt.in, got, err, tt.want, tt.bad)
		}
	}
}

func FuzzWords(f *testing.F) {
	f.Add(`CGO_ENABLED=1 go build -ldflags "-s -w" -o /out/x ./cmd/x`)
	f.Add(`'a "b' "c 'd"`)
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return // a Dockerfile is text
		}
		words, err := Words(s)
		if err != nil {
			return
		}
		n := 0
		for _, w := range words {
			n += len(w)
		}
		if n > len(s) {
			t.Fatalf("words %q longer than the line %q", words, s)
		}
		if !strings.ContainsAny(s, `"'`) && !strings.ContainsAny(s, "\n\r\v\f\u0085\u00a0") && strings.IndexFunc(s, func(r rune) bool { return r > 0x7f }) < 0 {
			if want := strings.Fields(s); !slices.Equal(words, want) && !(len(words) == 0 && len(want) == 0) {
				t.Fatalf("Words(%q) = %q, want %q", s, words, want)
			}
		}
	})
}
