package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/nodeshim/nodeshim/bpf"
)

// TestRuntimeBinaryFromVerboseInfo reads the runtime binary from CRI
// verbose info as containerd gives it, and refuses what is not JSON.
func TestRuntimeBinaryFromVerboseInfo(t *testing.T) {
	cases := []struct {
		name string
		info map[string]string
		want string
		err  string
	}{
		{"containerd runc options", map[string]string{"info": `{"pid":42,"runtimeType":"io.containerd.runc.v2","runtimeOptions":{"binary_name":"/usr/local/bin/crun","root":"/run/crun"}}`}, "/usr/local/bin/crun", ""},
		{"default binary", map[string]string{"info": `{"pid":42,"runtimeOptions":{"root":"/run/runc"}}`}, "", ""},
		{"no options", map[string]string{"info": `{"pid":42}`}, "", ""},
		{"null options", map[string]string{"info": `{"runtimeOptions":null}`}, "", ""},
		{"no info", map[string]string{}, "", ""},
		{"not json", map[string]string{"info": `{"runtimeOptions":`}, "", "decode verbose info"},
		{"wrong type", map[string]string{"info": `{"runtimeOptions":{"binary_name":7}}`}, "", "decode verbose info"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := runtimeBinaryFromVerboseInfo(tc.info)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("= %q, %v, want %q", got, err, tc.want)
			}
		})
	}
}

func FuzzRuntimeBinaryFromVerboseInfo(f *testing.F) {
	f.Add(`{"runtimeOptions":{"binary_name":"/usr/bin/crun"}}`)
	f.Add(`{"pid":1}`)
	f.Fuzz(func(t *testing.T, info string) {
		runtimeBinaryFromVerboseInfo(map[string]string{"info": info})
	})
}

// TestWriteRecordTable marks each syscall with where it comes from: the
// workload, the runtime's needs, or both; a need the workload never made
// has a count of 0.
func TestWriteRecordTable(t *testing.T) {
	named := []bpf.NamedCount{
		{SyscallCount: bpf.SyscallCount{Nr: 0, Count: 12}, Name: "read"},
		{SyscallCount: bpf.SyscallCount{Nr: 59, Count: 1}, Name: "execve"},
		{SyscallCount: bpf.SyscallCount{Nr: bpf.OtherSyscall, Count: 2}},
	}
	var out bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetErr(&out)
	if err := writeRecordTable(cmd, named, []string{"execve", "fstatfs"}); err != nil {
		t.Fatal(err)
	}
	want := `SYSCALL    NR    COUNT  SOURCE
read       0     12     workload
execve     59    1      workload,runtime
(unnamed)  1023  2      workload
fstatfs    138   0      runtime
`
	if out.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", out.String(), want)
	}
}
