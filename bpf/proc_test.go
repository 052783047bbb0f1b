package bpf

import (
	"errors"
	"slices"
	"testing"
)

func TestParseStatPPID(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		want    int
		wantErr bool
	}{
		{"plain", "42 (bash) S 7 42 42 34816 42 4194304", 7, false},
		{"comm with spaces and parentheses", "42 (a) b (c) S 9 42", 9, false},
		{"kernel thread", "2 (kthreadd) S 0 0 0", 0, false},
		{"no comm", "42 bash S 7", 0, true},
		{"truncated after comm", "42 (bash) S", 0, true},
		{"ppid not a number", "42 (bash) S x 1", 0, true},
		{"negative ppid", "42 (bash) S -3 1", 0, true},
		{"empty", "", 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseStatPPID([]byte(tc.in))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("ParseStatPPID(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.wantErr)
			}
			if err != nil && !errors.Is(err, ErrBadStat) {
				t.Fatalf("error does not wrap ErrBadStat: %v", err)
			}
		})
	}
}

func FuzzParseStatPPID(f *testing.F) {
	f.Add([]byte("42 (bash) S 7 42 42 34816 42 4194304"))
	f.Add([]byte("42 (a) b) S 9 42"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ppid, err := ParseStatPPID(data)
		if err != nil {
			if !errors.Is(err, ErrBadStat) {
				t.Fatalf("error does not wrap ErrBadStat: %v", err)
			}
			return
		}
		if ppid < 0 {
			t.Fatalf("negative ppid %d", ppid)
		}
	})
}

func TestDescendants(t *testing.T) {
	cases := []struct {
		name string
		pids []int
		want []uint32
	}{
		{"subtree", []int{100}, []uint32{100, 101, 102}},
		{"leaf", []int{102}, []uint32{102}},
		{"whole tree", []int{1}, []uint32{1, 100, 101, 102, 200}},
		{"unknown pid", []int{999}, []uint32{999}},
		{"overlapping roots", []int{101, 100, 200}, []uint32{100, 101, 102, 200}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Descendants("testdata/proc", tc.pids...)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Descendants(%v) = %v, want %v", tc.pids, got, tc.want)
			}
		})
	}
}
