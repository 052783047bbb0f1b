package kernel

import (
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReadConfigFile(t *testing.T) {
	tests := []struct {
		name string
		file string
		want map[string]Tristate
		vals map[string]string
	}{
		{
			name: "debian 6.1 plain",
			file: "testdata/config/debian-6.1.0-50-amd64.config",
			want: map[string]Tristate{
				"PSI": Yes, "CONFIG_PSI_DEFAULT_DISABLED": Unset, "IKCONFIG": Unset,
				"USER_NS": Yes, "NF_TABLES": Module, "OVERLAY_FS": Module, "BRIDGE_NETFILTER": Module, "IP_VS": Module, "SWAP": Yes, "NO_SUCH_OPTION": Unset,
			},
			vals: map[string]string{"IP_VS_TAB_BITS": "12", "CC_VERSION_TEXT": `"gcc-12 (Debian 12.2.0-14+deb12u1) 12.2.0"`},
		},
		{
			name: "firecracker 6.18 gzip",
			file: "testdata/config/fc-6.18.44.config.gz",
			want: map[string]Tristate{
				"PSI": Yes, "PSI_DEFAULT_DISABLED": Yes, "NF_TABLES": Yes, "IP_VS": Unset, "OVERLAY_FS": Yes, "OVERLAY_FS_INDEX": Unset,
			},
			vals: map[string]string{"CC_VERSION_TEXT": `"gcc (GCC) 15.3.0"`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ReadConfigFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			if c.Source != tc.file || len(c.Options) < 150 {
				t.Errorf("source %q, %d options", c.Source, len(c.Options))
			}
			for name, want := range tc.want {
				if got := c.Get(name); got != want {
					t.Errorf("Get(%s) = %s, want %s", name, got, want)
				}
			}
			for name, want := range tc.vals {
				if got, ok := c.Value(name); !ok || got != want {
					t.Errorf("Value(%s) = %q, %v; want %q", name, got, ok, want)
				}
			}
		})
	}
}

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    map[string]string
		wantErr string
	}{
		{name: "empty", in: "", want: map[string]string{}},
		{name: "values", in: "CONFIG_A=y\nCONFIG_B=m\n# CONFIG_C is not set\nCONFIG_HZ=250\nCONFIG_S=\"a=b c\"\n",
			want: map[string]string{"CONFIG_A": "y", "CONFIG_B": "m", "CONFIG_HZ": "250", "CONFIG_S": `"a=b c"`}},
		{name: "crlf and indentation", in: "  CONFIG_A=y\r\n\r\n", want: map[string]string{"CONFIG_A": "y"}},
		{name: "not an option", in: "CONFIG_A=y\nhello\n", wantErr: "line 2"},
		{name: "no value", in: "CONFIG_A\n", wantErr: "line 1"},
		{name: "bad name", in: "CONFIG_A-B=y\n", wantErr: "line 1"},
		{name: "bare prefix", in: "CONFIG_=y\n", wantErr: "line 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseConfig([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, %v; want error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

func FuzzParseConfig(f *testing.F) {
	// A real config's head (the whole file makes each minimisation of
	// an interesting input take the fuzzer's full minute).
	b, err := os.ReadFile("testdata/config/debian-6.1.0-50-amd64.config")
	if err != nil {
		f.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	f.Add([]byte(strings.Join(lines[:40], "")))
	f.Add([]byte("CONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C=\"x\"\n"))
	f.Add([]byte("CONFIG_=\n=\n#\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		opts, err := ParseConfig(b)
		if err != nil {
			return
		}
		c := &Config{Options: opts}
		for name, v := range opts {
			if !strings.HasPrefix(name, "CONFIG_") || strings.ContainsAny(name, "= \t\n") {
				t.Fatalf("bad name %q", name)
			}
			got, ok := c.Value(name)
			if !ok || got != v {
				t.Fatalf("Value(%q) = %q, %v", name, got, ok)
			}
			if st := c.Get(name); st != Yes && st != Module && st != Unset {
				t.Fatalf("Get(%q) = %q", name, st)
			}
		}
	})
}

func TestLoadConfigOrder(t *testing.T) {
	const rel = "6.1.0-50-amd64"
	gz := func(t *testing.T, path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		zw := gzip.NewWriter(f)
		zw.Write([]byte(content))
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	tests := []struct {
		name   string
		setup  func(t *testing.T, h *Host)
		source string // relative to the temp root; "" for ErrNoConfig
		psi    Tristate
	}{
		{"proc first", func(t *testing.T, h *Host) {
			gz(t, filepath.Join(h.ProcRoot, "config.gz"), "CONFIG_PSI=y\n")
			writeFile(t, filepath.Join(h.BootRoot, "config-"+rel), "CONFIG_PSI=m\n")
		}, "proc/config.gz", Yes},
		{"boot second", func(t *testing.T, h *Host) {
			writeFile(t, filepath.Join(h.BootRoot, "config-"+rel), "CONFIG_PSI=m\n")
			writeFile(t, filepath.Join(h.ModulesRoot, rel, "config"), "CONFIG_PSI=y\n")
		}, "boot/config-" + rel, Module},
		{"modules last, gzip too", func(t *testing.T, h *Host) {
			gz(t, filepath.Join(h.ModulesRoot, rel, "config"), "# CONFIG_PSI is not set\n")
		}, "lib/modules/" + rel + "/config", Unset},
		{"other release ignored", func(t *testing.T, h *Host) {
			writeFile(t, filepath.Join(h.BootRoot, "config-6.1.0-49-amd64"), "CONFIG_PSI=y\n")
		}, "", Unset},
		{"none", func(*testing.T, *Host) {}, "", Unset},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			h := &Host{ProcRoot: filepath.Join(root, "proc"), BootRoot: filepath.Join(root, "boot"), ModulesRoot: filepath.Join(root, "lib/modules")}
			tc.setup(t, h)
			c, err := LoadConfig(h, rel)
			if tc.source == "" {
				if !errors.Is(err, ErrNoConfig) || !strings.Contains(err.Error(), "config-"+rel) {
					t.Fatalf("got %v, %v; want ErrNoConfig naming the paths", c, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Source != filepath.Join(root, tc.source) || c.Get("PSI") != tc.psi {
				t.Errorf("source %s PSI %s; want %s %s", c.Source, c.Get("PSI"), tc.source, tc.psi)
			}
		})
	}
}

func TestReadConfigFileErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad")
	writeFile(t, bad, "CONFIG_A=y\nthis is not a config\n")
	brokenGz := filepath.Join(dir, "broken.gz")
	writeFile(t, brokenGz, "\x1f\x8b\x08\x00garbage")
	for _, p := range []string{bad, brokenGz, filepath.Join(dir, "missing")} {
		if _, err := ReadConfigFile(p); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("ReadConfigFile(%s) = %v; want an error naming the file", p, err)
		}
	}
}

// BenchmarkReadConfig reads the recorded configs; the gzip one is a part,
// the live /proc/config.gz (when there is one) the whole of a real config.
func BenchmarkReadConfig(b *testing.B) {
	for _, p := range []string{"testdata/config/fc-6.18.44.config.gz", "/proc/config.gz"} {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		b.Run(filepath.Base(p), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ReadConfigFile(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestConfigHZ(t *testing.T) {
	for _, tc := range []struct {
		config string
		want   int
		err    string
	}{
		{"CONFIG_HZ_250=y\nCONFIG_HZ=250\n", 250, ""},
		{"CONFIG_HZ=1000\n", 1000, ""},
		{"CONFIG_PSI=y\n", 0, "no CONFIG_HZ"},
		{"CONFIG_HZ=\"fast\"\n", 0, "CONFIG_HZ=\"fast\" is not a tick rate"},
		{"CONFIG_HZ=0\n", 0, "CONFIG_HZ=0 is not a tick rate"},
	} {
		path := filepath.Join(t.TempDir(), "config")
		writeFile(t, path, tc.config)
		c, err := ReadConfigFile(path)
		if err != nil {
			t.Fatal(err)
		}
		hz, err := c.HZ()
		if hz != tc.want || (err == nil) != (tc.err == "") || err != nil && (!strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), path)) {
			t.Errorf("%q: HZ() = %d, %v; want %d, %q naming %s", tc.config, hz, err, tc.want, tc.err, path)
		}
	}
}

// TestRunningConfig finds the config of the release that procfs names, not
// another installed kernel's, under a host mounted elsewhere.
func TestRunningConfig(t *testing.T) {
	root := t.TempDir()
	h := HostUnder(root, "")
	if h.ProcRoot != filepath.Join(root, "proc") || h.BootRoot != filepath.Join(root, "boot") ||
		h.SysRoot != filepath.Join(root, "sys") || h.ModulesRoot != filepath.Join(root, "lib/modules") {
		t.Fatalf("HostUnder(%s) = %+v", root, h)
	}
	if p := HostUnder(root, "/host/proc").ProcRoot; p != "/host/proc" {
		t.Errorf("HostUnder with a procfs elsewhere: ProcRoot %s", p)
	}
	if _, err := RunningConfig(h); err == nil || !strings.Contains(err.Error(), "osrelease") {
		t.Errorf("without procfs: %v, want an error naming osrelease", err)
	}
	writeFile(t, filepath.Join(h.ProcRoot, "sys/kernel/osrelease"), "6.1.0-50-amd64\n")
	writeFile(t, filepath.Join(h.ProcRoot, "sys/kernel/ostype"), "Linux\n")
	writeFile(t, filepath.Join(h.BootRoot, "config-6.1.0-49-amd64"), "CONFIG_HZ=1000\n")
	if _, err := RunningConfig(h); !errors.Is(err, ErrNoConfig) {
		t.Errorf("only another release's config: %v, want ErrNoConfig", err)
	}
	writeFile(t, filepath.Join(h.BootRoot, "config-6.1.0-50-amd64"), "CONFIG_HZ=250\n")
	c, err := RunningConfig(h)
	if err != nil {
		t.Fatal(err)
	}
	if hz, err := c.HZ(); hz != 250 || err != nil {
		t.Errorf("HZ() = %d, %v; want 250 from the running release's config", hz, err)
	}
}
