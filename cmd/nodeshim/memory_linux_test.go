package main

import (
	"bufio"
	"bytes"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// mapsText is a /proc/<pid>/maps of a nodeshim, with a library, the heap,
// a file with a space in its name and a replaced binary.
const mapsText = `00400000-00402000 r--p 00000000 fe:00 9979182                            /usr/bin/nodeshim
00402000-0114f000 r-xp 00002000 fe:00 9979182                            /usr/bin/nodeshim
0114f000-02049000 r--p 00d4f000 fe:00 9979182                            /usr/bin/nodeshim
0204a000-020fb000 rw-p 01c4a000 fe:00 9979182                            /usr/bin/nodeshim
020fb000-02180000 rw-p 00000000 00:00 0                                  [heap]
7f0000000000-7f0000001000 r--p 00000000 fe:00 12                         /usr/bin/nodeshim-reporter
7f0000002000-7f0000003000 r-xp 00000000 fe:00 13                         /usr/lib/x86_64-linux-gnu/libseccomp.so.2
7f0000004000-7f0000005000 r--p 00000000 fe:00 14                         /tmp/my dir/nodeshim
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
`

func TestExecutableMappings(t *testing.T) {
	tests := []struct {
		name, maps, exe string
		want            []codeMapping
		wantErr         bool
	}{
		{"code and read-only data, not data, other files or the heap", mapsText, "/usr/bin/nodeshim",
			[]codeMapping{{0x400000, 0x402000}, {0x402000, 0x114f000}, {0x114f000, 0x2049000}}, false},
		{"path with a space", mapsText, "/tmp/my dir/nodeshim", []codeMapping{{0x7f0000004000, 0x7f0000005000}}, false},
		{"binary replaced since it started", "00400000-00402000 r-xp 00000000 fe:00 7 /usr/bin/nodeshim (deleted)\n", "/usr/bin/nodeshim",
			[]codeMapping{{0x400000, 0x402000}}, false},
		{"not mapped", mapsText, "/usr/sbin/criu", nil, false},
		{"empty", "", "/usr/bin/nodeshim", nil, false},
		{"bad address", "00400000 r-xp 00000000 fe:00 7 /usr/bin/nodeshim\n", "/usr/bin/nodeshim", nil, true},
		{"empty range", "00402000-00400000 r-xp 00000000 fe:00 7 /usr/bin/nodeshim\n", "/usr/bin/nodeshim", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := executableMappings([]byte(tt.maps), tt.exe)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "line 1") {
				t.Errorf("error %q does not name the line", err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %x, want %x", got, tt.want)
			}
		})
	}
}

func FuzzExecutableMappings(f *testing.F) {
	f.Add([]byte(mapsText), "/usr/bin/nodeshim")
	f.Add([]byte("00400000-00402000 r-xp 00000000 fe:00 7 /x (deleted)\n"), "/x")
	f.Fuzz(func(t *testing.T, maps []byte, exe string) {
		ms, err := executableMappings(maps, exe)
		if err != nil {
			return
		}
		for _, m := range ms {
			if m.end <= m.start {
				t.Fatalf("empty or inverted range %x", m)
			}
		}
	})
}

// exeRSS sums the resident size of the mappings of the running executable
// in /proc/self/smaps, in KiB.
func exeRSS(t *testing.T) int {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	kib, ours := 0, false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && len(f[1]) == 4:
			ours = len(f) >= 6 && f[5] == exe && f[1][1] != 'w'
		case ours && len(f) == 3 && f[0] == "Rss:":
			n, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatalf("smaps: %q: %v", sc.Text(), err)
			}
			kib += n
		}
	}
	return kib
}

// TestPageOutCode pages out this test binary's code and read-only data:
// the kernel takes back most of what was resident, and what runs next
// faults back in.
func TestPageOutCode(t *testing.T) {
	// The test binary was written moments ago: the kernel does not write
	// back dirty file pages to reclaim them on madvise, so they would stay
	// until the flusher had written them. A deployed binary is clean.
	exe, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	if err := exe.Sync(); err != nil {
		t.Fatal(err)
	}
	before := exeRSS(t)
	n, err := pageOutCode()
	if err != nil {
		t.Fatal(err)
	}
	after := exeRSS(t)
	t.Logf("advised %d KiB of mappings; resident %d KiB before, %d after", n>>10, before, after)
	if n <= 0 {
		t.Fatalf("advised %d bytes", n)
	}
	// A file on tmpfs or ramfs (the 6.1 guest's root) has nowhere to go
	// but swap, which the guest lacks: the kernel keeps its pages.
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(exe.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC {
		t.Logf("the binary is on a memory filesystem (%#x): its pages stay", st.Type)
		return
	}
	if after >= before/2 {
		t.Errorf("resident %d KiB before, %d after: want most of it reclaimed", before, after)
	}
}
