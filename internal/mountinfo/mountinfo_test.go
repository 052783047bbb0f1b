package mountinfo

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want []Entry
	}{
		{"cgroup2 with optional fields", "30 22 0:26 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n",
			[]Entry{{Root: "/", Point: "/sys/fs/cgroup", FSType: "cgroup2", Source: "cgroup2", SuperOptions: []string{"rw", "nsdelegate"}}}},
		{"escaped space in the mount point", `45 28 0:38 / /var/lib/kubelet/pods/3f1c\040a/volumes rw,relatime - tmpfs tmpfs rw,size=1048576k`,
			[]Entry{{Root: "/", Point: "/var/lib/kubelet/pods/3f1c a/volumes", FSType: "tmpfs", Source: "tmpfs", SuperOptions: []string{"rw", "size=1048576k"}}}},
		{"two optional fields, v1 controllers", "33 30 0:30 / /sys/fs/cgroup/cpu,cpuacct rw master:1 shared:7 - cgroup cgroup rw,cpu,cpuacct",
			[]Entry{{Root: "/", Point: "/sys/fs/cgroup/cpu,cpuacct", FSType: "cgroup", Source: "cgroup", SuperOptions: []string{"rw", "cpu", "cpuacct"}}}},
		{"no super options, escaped backslash in the source", `50 1 0:40 / /mnt rw - fuse.sshfs user@host:/a\134b`,
			[]Entry{{Root: "/", Point: "/mnt", FSType: "fuse.sshfs", Source: `user@host:/a\b`}}},
		{"bind of a sub-tree, blank lines skipped", "\n\n31 30 0:26 /kubepods /host/cg rw - cgroup2 cgroup2 rw\n\n",
			[]Entry{{Root: "/kubepods", Point: "/host/cg", FSType: "cgroup2", Source: "cgroup2", SuperOptions: []string{"rw"}}}},
		{"incomplete escape kept as is", `1 2 0:3 / /a\07 rw - tmpfs x rw`,
			[]Entry{{Root: "/", Point: `/a\07`, FSType: "tmpfs", Source: "x", SuperOptions: []string{"rw"}}}},
		{"empty", "", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, line string }{
		{"too few fields", "1 2 3", "line 1"},
		{"no separator", "30 22 0:26 / /x rw shared:9 cgroup2 cgroup2 rw", "line 1"},
		{"nothing after the separator", "30 22 0:26 / /x rw -", "line 1"},
		{"type but no source, on line 2", "30 22 0:26 / /x rw - tmpfs tmpfs rw\n23 28 0:22 / /proc rw - proc", "line 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), tc.line) {
				t.Fatalf("Parse(%q) = %v, want ErrSyntax naming %s", tc.in, err, tc.line)
			}
		})
	}
}

func TestParseRecordedHosts(t *testing.T) {
	files, err := filepath.Glob("../../testdata/hosts/*/proc/self/mountinfo")
	if err != nil || len(files) == 0 {
		t.Fatalf("recorded hosts: %v, %v", files, err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		entries, err := Parse(data)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if want := bytes.Count(bytes.TrimSpace(data), []byte{'\n'}) + 1; len(entries) != want {
			t.Errorf("%s: %d entries, want one per line (%d)", file, len(entries), want)
		}
	}
}

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../../testdata/hosts/*/proc/self/mountinfo")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("30 22 0:26 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"))
	f.Add([]byte(`1 2 0:3 / /a\134b\040c\07 rw - cgroup2 x rw` + "\n"))
	f.Add([]byte("23 28 0:22 / /proc rw\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("error %v does not wrap ErrSyntax", err)
			}
			return
		}
		for _, e := range entries {
			if e.FSType == "" || e.Point == "" {
				t.Fatalf("entry without type or mount point: %+v", e)
			}
		}
	})
}
