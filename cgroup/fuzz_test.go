package cgroup

import (
	"errors"
	"strconv"
	"testing"
)

func FuzzParseFlatKeyed(f *testing.F) {
	f.Add([]byte("anon 1\nfile 2\ninactive_file 3\n"))
	f.Add([]byte("usage_usec 18446744073709551615\n"))
	f.Add([]byte("x 18446744073709551616\n"))
	f.Add([]byte("bad\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		n := 0
		err := ParseFlatKeyed(data, func(k []byte, v uint64) {
			if len(k) == 0 {
				t.Fatal("empty key")
			}
			n++
		})
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("error %v does not wrap ErrMalformed", err)
		}
	})
}

func FuzzParseMeminfo(f *testing.F) {
	f.Add([]byte("MemTotal:       16384000 kB\nMemFree:         2048000 kB\nInactive(file):  4096000 kB\n"))
	f.Add([]byte("MemTotal: 1 MB\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseMeminfo(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if m.MemTotal%1024 != 0 || m.MemFree%1024 != 0 {
			t.Fatalf("values not in kB: %+v", m)
		}
	})
}

func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{"max\n", "1024\n", "max", "", "-1\n", "18446744073709551616\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		l, ok := ParseLimit(data)
		if v := strconv.FormatUint(l.Value, 10); ok && !l.Unlimited && string(data) != v && string(data) != v+"\n" {
			t.Fatalf("accepted %q as %v", data, l)
		}
	})
}

func FuzzParseV1Mount(f *testing.F) {
	f.Add([]byte("31 25 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"), "memory")
	f.Add([]byte("26 25 0:23 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"), "memory")
	f.Fuzz(func(t *testing.T, data []byte, ctrl string) {
		p, err := ParseV1Mount(data, ctrl)
		if (err == nil) == (p == "") {
			t.Fatalf("ParseV1Mount = %q, %v", p, err)
		}
	})
}
