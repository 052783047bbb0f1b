package bpf

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nodeshim/nodeshim/kernel/seccomp"
	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/testenv/golden"
)

func mustParse(t *testing.T, file string) *seccomp.Profile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	p, err := seccomp.Parse(data, seccomp.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBuildProfile(t *testing.T) {
	cases := []struct {
		name   string
		names  []string
		base   string
		golden string
		kept   []string
	}{
		{"recorded only", []string{"write", "read", "exit_group", "read", "execve"}, "", "profile-recorded.json", nil},
		{"same set in another order", []string{"execve", "exit_group", "read", "write"}, "", "profile-recorded.json", nil},
		{"merged with a base", []string{"write", "read", "openat", "socket", "ptrace"}, "base.json", "profile-merged.json", []string{"ptrace"}},
		{"nothing recorded", nil, "", "profile-empty.json", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var base *seccomp.Profile
			if tc.base != "" {
				base = mustParse(t, tc.base)
			}
			p, kept := BuildProfile(tc.names, "SCMP_ARCH_X86_64", base)
			if !slices.Equal(kept, tc.kept) {
				t.Errorf("kept = %q, want %q", kept, tc.kept)
			}
			got, err := MarshalProfile(p)
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, tc.golden, got)
			if _, err := seccomp.Parse(got, seccomp.ParseOptions{}); err != nil {
				t.Errorf("the profile does not parse back: %v", err)
			}
		})
	}
}

func FuzzBuildProfile(f *testing.F) {
	for _, name := range []string{"base.json", "profile-merged.json", "profile-recorded.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["read"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":1,"op":"SCMP_CMP_EQ"}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := seccomp.Parse(data, seccomp.ParseOptions{})
		if err != nil {
			return // seccomp's own fuzz tests cover what Parse refuses
		}
		// Whatever parses must merge and render deterministically.
		pa, _ := BuildProfile([]string{"read", "write"}, "SCMP_ARCH_X86_64", p)
		a, err := MarshalProfile(pa)
		if err != nil {
			t.Fatal(err)
		}
		pb, _ := BuildProfile([]string{"write", "read"}, "SCMP_ARCH_X86_64", p)
		b, _ := MarshalProfile(pb)
		if !bytes.Equal(a, b) {
			t.Fatalf("merge is not deterministic:\n%s\n%s", a, b)
		}
	})
}

func TestSyscallName(t *testing.T) {
	cases := []struct {
		nr      uint32
		want    string
		wantErr bool
	}{
		{unix.SYS_READ, "read", false},
		{unix.SYS_EXECVE, "execve", false},
		{unix.SYS_SYSINFO, "sysinfo", false},
		{unix.SYS_EXIT_GROUP, "exit_group", false},
		{unix.SYS_OPENAT2, "openat2", false},
		{OtherSyscall, "", true},
		{900, "", true},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.nr), func(t *testing.T) {
			got, err := SyscallName(tc.nr)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("SyscallName(%d) = %q, %v; want %q, error %v", tc.nr, got, err, tc.want, tc.wantErr)
			}
		})
	}
}
