package kernel

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/kernel/capability"
)

func TestParseRelease(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    capability.Version
		suffix  string
		wantErr bool
	}{
		{name: "debian", in: "6.1.0-50-amd64", want: capability.V(6, 1, 0), suffix: "-50-amd64"},
		{name: "rhel9", in: "5.14.0-427.el9.x86_64", want: capability.V(5, 14, 0), suffix: "-427.el9.x86_64"},
		{name: "firecracker", in: "6.18.44-fc-v657", want: capability.V(6, 18, 44), suffix: "-fc-v657"},
		{name: "ubuntu", in: "6.8.0-45-generic", want: capability.V(6, 8, 0), suffix: "-45-generic"},
		{name: "rhel7", in: "3.10.0-1160.119.1.el7.x86_64", want: capability.V(3, 10, 0), suffix: "-1160.119.1.el7.x86_64"},
		{name: "plain", in: "6.12.7", want: capability.V(6, 12, 7)},
		{name: "no patch", in: "4.19", want: capability.V(4, 19, 0)},
		{name: "rc without patch", in: "6.8-rc3", want: capability.V(6, 8, 0), suffix: "-rc3"},
		{name: "plus", in: "5.15.0+", want: capability.V(5, 15, 0), suffix: "+"},
		{name: "fourth component stays in suffix", in: "4.4.0.150-x", want: capability.V(4, 4, 0), suffix: ".150-x"},
		{name: "wsl", in: "5.15.153.1-microsoft-standard-WSL2", want: capability.V(5, 15, 153), suffix: ".1-microsoft-standard-WSL2"},
		{name: "empty", in: "", wantErr: true},
		{name: "no minor", in: "6", wantErr: true},
		{name: "no minor digits", in: "6.x", wantErr: true},
		{name: "letters", in: "linux", wantErr: true},
		{name: "leading v", in: "v6.1.0", wantErr: true},
		{name: "overflow", in: "99999999999999999999.1.0", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseRelease(tc.in)
			if tc.wantErr {
				if !errors.Is(err, ErrBadRelease) {
					t.Fatalf("ParseRelease(%q) = %+v, %v; want ErrBadRelease", tc.in, got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Version != tc.want || got.Suffix != tc.suffix || got.Raw != tc.in {
				t.Errorf("ParseRelease(%q) = %+v, want %v suffix %q", tc.in, got, tc.want, tc.suffix)
			}
		})
	}
}

func TestReleaseComparable(t *testing.T) {
	// Releases sort by their upstream version whatever the suffix.
	order := []string{"3.10.0-1160.el7.x86_64", "4.19", "5.4.0-200-generic", "5.13.0", "5.14.0-427.el9.x86_64", "6.1.0-50-amd64", "6.1.176", "6.18.44-fc-v657"}
	for i := 1; i < len(order); i++ {
		a, _ := ParseRelease(order[i-1])
		b, _ := ParseRelease(order[i])
		if a.Version.Compare(b.Version) >= 0 {
			t.Errorf("%s should be older than %s", order[i-1], order[i])
		}
	}
}

func FuzzParseRelease(f *testing.F) {
	for _, s := range []string{"6.1.0-50-amd64", "5.14.0-427.el9.x86_64", "6.18.44-fc-v657", "4.19", "6.8-rc3", "", "6.", "1.2.3.4", "0.0.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRelease(s)
		if err != nil {
			if !errors.Is(err, ErrBadRelease) {
				t.Fatalf("error not wrapping ErrBadRelease: %v", err)
			}
			return
		}
		if r.Raw != s || !strings.HasSuffix(s, r.Suffix) {
			t.Fatalf("ParseRelease(%q) = %+v: raw or suffix do not match the input", s, r)
		}
		v := r.Version
		if v.Major < 0 || v.Minor < 0 || v.Patch < 0 {
			t.Fatalf("negative component in %+v", r)
		}
		// The numeric prefix, reformatted, parses to the same version.
		prefix := strings.TrimSuffix(s, r.Suffix)
		r2, err := ParseRelease(fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch))
		if err != nil || r2.Version != v {
			t.Fatalf("round trip of %q (prefix %q): %+v, %v", s, prefix, r2, err)
		}
	})
}

func TestKubeArch(t *testing.T) {
	for machine, want := range map[string]string{
		"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "armv6l": "arm",
		"ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64", "i686": "386",
		"loongarch64": "loong64", "sparc64": "", "": "",
	} {
		if got := KubeArch(machine); got != want {
			t.Errorf("KubeArch(%q) = %q, want %q", machine, got, want)
		}
	}
}

func TestReadIdentity(t *testing.T) {
	id, err := ReadIdentity(filepath.Join("..", "testdata", "hosts", "rhel-8.10", "proc"))
	if err != nil {
		t.Fatal(err)
	}
	if id.Raw != "4.18.0-553.el8_10.x86_64" || id.Version != capability.V(4, 18, 0) || id.Suffix != "-553.el8_10.x86_64" {
		t.Errorf("release: %+v", id.Release)
	}
	if id.Arch != "amd64" || id.OS != "linux" || id.Machine != "x86_64" {
		t.Errorf("platform: %+v", id)
	}
	want := map[string]string{"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"}
	if got := id.Labels(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("labels %v, want %v", got, want)
	}

	if _, err := ReadIdentity(t.TempDir()); err == nil || !strings.Contains(err.Error(), "osrelease") {
		t.Errorf("empty proc: got %v, want an error naming osrelease", err)
	}
}

func TestHostLoadFallsBackToUname(t *testing.T) {
	// A kernel without /proc/sys/kernel/arch: the machine comes from uname.
	proc := t.TempDir()
	writeFile(t, filepath.Join(proc, "sys/kernel/osrelease"), "4.19.0-27-amd64\n")
	writeFile(t, filepath.Join(proc, "sys/kernel/ostype"), "Linux\n")
	h := &Host{ProcRoot: proc, SysRoot: t.TempDir(), BootRoot: t.TempDir(), ModulesRoot: t.TempDir(), Calls: &fakeCalls{machine: "aarch64"}}
	h.Load(t.Context())
	if h.IdentityErr != nil || h.Identity.Arch != "arm64" || h.Identity.Version != capability.V(4, 19, 0) {
		t.Errorf("identity %+v, %v", h.Identity, h.IdentityErr)
	}
	if !errors.Is(h.ConfigErr, ErrNoConfig) || h.Config != nil {
		t.Errorf("config %v, %v; want ErrNoConfig", h.Config, h.ConfigErr)
	}
	if h.MountsErr == nil {
		t.Error("no mountinfo: want MountsErr")
	}
}
