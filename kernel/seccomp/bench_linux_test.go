package seccomp

import (
	"os"
	"testing"
)

func benchProfile(b *testing.B, arches bool) []byte {
	data, err := os.ReadFile("testdata/runtime-default.json")
	if err != nil {
		b.Fatal(err)
	}
	if !arches {
		p, err := Parse(data, ParseOptions{})
		if err != nil {
			b.Fatal(err)
		}
		_ = p
	}
	return data
}

func BenchmarkParse(b *testing.B) {
	data := benchProfile(b, true)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data, ParseOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCompileCold(b *testing.B) {
	data := benchProfile(b, true)
	p, err := Parse(data, ParseOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		arches []string
		opt    Optimize
	}{
		{"native/linear", nil, OptimizeLinear},
		{"native/tree", nil, OptimizeTree},
		{"3arch/linear", p.Architectures, OptimizeLinear},
		{"3arch/tree", p.Architectures, OptimizeTree},
	} {
		q := *p
		q.Architectures = tc.arches
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Compile(&q, CompileOptions{Optimize: tc.opt}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
