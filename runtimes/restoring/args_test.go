package restoring

import (
	"errors"
	"reflect"
	"testing"
)

func TestParseCall(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want Call
		err  bool
	}{
		{name: "create as the shim writes it",
			args: []string{"--root", "/run/r", "--log", "/b/log.json", "--log-format", "json", "create", "--bundle", "/b", "--pid-file", "/b/init.pid", "abc"},
			want: Call{Global: []string{"--root", "/run/r", "--log", "/b/log.json", "--log-format", "json"}, Root: "/run/r", Log: "/b/log.json", LogFormat: "json",
				Command: "create", Bundle: "/b", PidFile: "/b/init.pid", ID: "abc"}},
		{name: "flags with =, console socket, no-pivot",
			args: []string{"--root=/r", "--systemd-cgroup", "create", "--bundle=/b", "--console-socket", "/s.sock", "--no-pivot", "--no-new-keyring", "x.1"},
			want: Call{Global: []string{"--root=/r", "--systemd-cgroup"}, Root: "/r", Command: "create", Bundle: "/b", ConsoleSocket: "/s.sock", NoPivot: true, NoNewKeyring: true, ID: "x.1"}},
		{name: "start", args: []string{"--root", "/r", "start", "abc"},
			want: Call{Global: []string{"--root", "/r"}, Root: "/r", Command: "start", ID: "abc"}},
		{name: "delete --force", args: []string{"--root", "/r", "delete", "--force", "abc"},
			want: Call{Global: []string{"--root", "/r"}, Root: "/r", Command: "delete", ID: "abc"}},
		{name: "id after --", args: []string{"start", "--", "abc"}, want: Call{Command: "start", ID: "abc"}},
		{name: "other command is not interpreted", args: []string{"--root", "/r", "exec", "--process", "/p.json", "abc"},
			want: Call{Global: []string{"--root", "/r"}, Root: "/r", Command: "exec"}},
		{name: "version", args: []string{"--version"}, want: Call{Global: []string{"--version"}}},
		{name: "global flag without value", args: []string{"--root"}, err: true},
		{name: "create flag without value", args: []string{"create", "--bundle"}, err: true},
		{name: "no id", args: []string{"start"}, err: true},
		{name: "two ids", args: []string{"start", "a", "b"}, err: true},
		{name: "id escaping the root", args: []string{"start", "../x"}, err: true},
		{name: "id dot-dot", args: []string{"delete", ".."}, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCall(tc.args)
			if tc.err {
				if !errors.Is(err, ErrUsage) {
					t.Fatalf("ParseCall(%q) = %+v, %v; want ErrUsage", tc.args, got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseCall(%q)\n got %+v\nwant %+v", tc.args, got, tc.want)
			}
		})
	}
}

func FuzzParseCall(f *testing.F) {
	f.Add("--root\x00/r\x00create\x00--bundle\x00/b\x00id")
	f.Add("start\x00--\x00id")
	f.Add("delete\x00-f\x00../..")
	f.Fuzz(func(t *testing.T, s string) {
		args := splitNUL(s)
		c, err := ParseCall(args)
		if err != nil {
			return
		}
		if (c.Command == "create" || c.Command == "start" || c.Command == "delete") && !validID(c.ID) {
			t.Fatalf("ParseCall(%q) accepted id %q", args, c.ID)
		}
	})
}

func splitNUL(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
