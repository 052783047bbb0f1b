package cgroup

import (
	"errors"
	"testing"
)

func TestParsePSI(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		want    PSI
		wantErr bool
	}{
		{"some and full", "some avg10=12.40 avg60=3.18 avg300=0.41 total=88123311\nfull avg10=0.00 avg60=0.00 avg300=0.07 total=29374437\n",
			PSI{Some: PSILine{1240, 318, 41, 88123311}, Full: PSILine{0, 0, 7, 29374437}, HasFull: true}, false},
		{"cpu before 5.13: some only", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", PSI{}, false},
		{"no final newline", "some avg10=100.00 avg60=0.01 avg300=0.00 total=18446744073709551615", PSI{Some: PSILine{10000, 1, 0, 18446744073709551615}}, false},
		{"empty", "", PSI{}, true},
		{"full first", "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", PSI{}, true},
		{"two some", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nsome avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", PSI{}, true},
		{"third line", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", PSI{}, true},
		{"fields out of order", "some avg60=0.00 avg10=0.00 avg300=0.00 total=0\n", PSI{}, true},
		{"one decimal", "some avg10=0.0 avg60=0.00 avg300=0.00 total=0\n", PSI{}, true},
		{"over 100 percent", "some avg10=100.01 avg60=0.00 avg300=0.00 total=0\n", PSI{}, true},
		{"leading zero", "some avg10=01.00 avg60=0.00 avg300=0.00 total=0\n", PSI{}, true},
		{"total overflows", "some avg10=0.00 avg60=0.00 avg300=0.00 total=18446744073709551616\n", PSI{}, true},
		{"negative total", "some avg10=0.00 avg60=0.00 avg300=0.00 total=-1\n", PSI{}, true},
		{"double space", "some avg10=0.00  avg60=0.00 avg300=0.00 total=0\n", PSI{}, true},
		{"trailing field", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0 x=1\n", PSI{}, true},
		{"blank line after", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n\n", PSI{}, true},
		{"CRLF", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\r\n", PSI{}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePSI([]byte(tc.in))
			if tc.wantErr {
				if !errors.Is(err, ErrPSISyntax) {
					t.Fatalf("ParsePSI = %+v, %v; want ErrPSISyntax", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParsePSI = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestAvgString(t *testing.T) {
	for a, want := range map[Avg]string{0: "0.00", 5: "0.05", 1240: "12.40", 10000: "100.00"} {
		if got := a.String(); got != want {
			t.Errorf("Avg(%d) = %q, want %q", uint32(a), got, want)
		}
	}
	if Avg(1240).Percent() != 12.4 {
		t.Error("Percent")
	}
}

func TestParsePSIDoesNotAllocate(t *testing.T) {
	in := []byte("some avg10=12.40 avg60=3.18 avg300=0.41 total=88123311\nfull avg10=0.00 avg60=0.00 avg300=0.07 total=29374437\n")
	if n := testing.AllocsPerRun(100, func() { _, _ = ParsePSI(in) }); n != 0 {
		t.Fatalf("ParsePSI allocates %v times", n)
	}
}

// FuzzParsePSI checks that the parser is exact: whatever it accepts prints
// back to the same bytes (with the final newline), and it never panics.
func FuzzParsePSI(f *testing.F) {
	for _, s := range []string{
		"some avg10=12.40 avg60=3.18 avg300=0.41 total=88123311\nfull avg10=0.00 avg60=0.00 avg300=0.07 total=29374437\n",
		"some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"some avg10=100.00 avg60=0.01 avg300=0.00 total=18446744073709551615",
		"full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"some avg10=0.0 avg60=0.00 avg300=0.00 total=0\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePSI(data)
		if err != nil {
			if !errors.Is(err, ErrPSISyntax) {
				t.Fatalf("error %v does not wrap ErrPSISyntax", err)
			}
			return
		}
		want := string(data)
		if want[len(want)-1] != '\n' {
			want += "\n"
		}
		if got := p.String(); got != want {
			t.Fatalf("accepted %q but it prints as %q", data, got)
		}
		for _, a := range []Avg{p.Some.Avg10, p.Some.Avg60, p.Some.Avg300, p.Full.Avg10, p.Full.Avg60, p.Full.Avg300} {
			if a > 10000 {
				t.Fatalf("average %d over 100%%", a)
			}
		}
	})
}
