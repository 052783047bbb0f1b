package criu

import (
	"os"
	"testing"
	"time"
)

func TestPIDTargetOfThisProcess(t *testing.T) {
	now := time.Now()
	tg, err := PIDTarget("/proc", os.Getpid(), now)
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Validate(); err != nil {
		t.Fatal(err)
	}
	if tg.Ref.Namespace != "host" || tg.Ref.Pod == "" || tg.Ref.Container == "" || len(tg.Args) == 0 {
		t.Errorf("target %+v", tg)
	}
	if tg.Created.After(now) || now.Sub(tg.Created) > 10*time.Minute {
		t.Errorf("this test process started at %v, now is %v", tg.Created, now)
	}
}

func TestParseStats(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"short", []byte{1, 2, 3}},
		{"wrong magic", make([]byte, 16)},
		{"length past the end", []byte{0x40, 0x59, 0x10, 0x55, 0x06, 0x33, 0x09, 0x57, 0xff, 0xff, 0, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := parseStats(tc.in); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func FuzzParseStats(f *testing.F) {
	f.Add([]byte{0x40, 0x59, 0x10, 0x55, 0x06, 0x33, 0x09, 0x57, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parseStats(b)
	})
}
