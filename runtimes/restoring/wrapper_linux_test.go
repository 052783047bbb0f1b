package restoring

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, exe, file string
		want            Config
		err             bool
	}{
		{name: "no file, runc", exe: "/opt/nodeshim/bin/nodeshim-runc",
			want: Config{Runtime: "runc", CheckpointDir: DefaultCheckpointDir, WorkDir: DefaultWorkDir, ReportCache: DefaultReportCache}},
		{name: "no file, installed as nodeshim-crun", exe: "/opt/nodeshim/bin/nodeshim-crun",
			want: Config{Runtime: "crun", CheckpointDir: DefaultCheckpointDir, WorkDir: DefaultWorkDir, ReportCache: DefaultReportCache}},
		{name: "file", exe: "/x/nodeshim-runc", file: `{"runtime":"/usr/bin/runc","checkpointDir":"/c","criu":"/usr/sbin/criu","maxBytes":10}`,
			want: Config{Runtime: "/usr/bin/runc", CheckpointDir: "/c", WorkDir: DefaultWorkDir, Criu: "/usr/sbin/criu", MaxBytes: 10, ReportCache: DefaultReportCache}},
		{name: "seal", exe: "/x/nodeshim-runc", file: `{"trustPolicy":"/etc/nodeshim/trust.json","identities":["/etc/nodeshim/node.agekey"]}`,
			want: Config{Runtime: "runc", CheckpointDir: DefaultCheckpointDir, WorkDir: DefaultWorkDir,
				TrustPolicy: "/etc/nodeshim/trust.json", Identities: []string{"/etc/nodeshim/node.agekey"}, ReportCache: DefaultReportCache}},
		{name: "report cache", exe: "/x/nodeshim-runc", file: `{"reportCache":"/srv/nodeshim/report-cache"}`,
			want: Config{Runtime: "runc", CheckpointDir: DefaultCheckpointDir, WorkDir: DefaultWorkDir, ReportCache: "/srv/nodeshim/report-cache"}},
		{name: "lazy TLS", exe: "/x/nodeshim-runc", file: `{"lazyTLS":{"caCert":"/etc/nodeshim/pki/ca.crt","cert":"/etc/nodeshim/pki/node.crt","key":"/etc/nodeshim/pki/node.key"}}`,
			want: Config{Runtime: "runc", CheckpointDir: DefaultCheckpointDir, WorkDir: DefaultWorkDir, ReportCache: DefaultReportCache,
				LazyTLS: &LazyTLS{CACert: "/etc/nodeshim/pki/ca.crt", Cert: "/etc/nodeshim/pki/node.crt", Key: "/etc/nodeshim/pki/node.key"}}},
		{name: "lazy TLS without a key", exe: "/x/nodeshim-runc", file: `{"lazyTLS":{"caCert":"/ca.crt","cert":"/node.crt"}}`, err: true},
		{name: "relative lazy TLS certificate", exe: "/x/nodeshim-runc", file: `{"lazyTLS":{"caCert":"/ca.crt","cert":"node.crt","key":"/node.key"}}`, err: true},
		{name: "lazy TLS unknown field", exe: "/x/nodeshim-runc", file: `{"lazyTLS":{"ca":"/ca.crt"}}`, err: true},
		{name: "relative report cache", exe: "/x/nodeshim-runc", file: `{"reportCache":"report-cache"}`, err: true},
		{name: "relative criu", exe: "/x/nodeshim-runc", file: `{"criu":"bin/criu"}`, err: true},
		{name: "criu by another name", exe: "/x/nodeshim-runc", file: `{"criu":"/opt/criu/criu-4.1"}`, err: true},
		{name: "relative trust policy", exe: "/x/nodeshim-runc", file: `{"trustPolicy":"trust.json"}`, err: true},
		{name: "relative identity", exe: "/x/nodeshim-runc", file: `{"identities":["/a","node.agekey"]}`, err: true},
		{name: "unknown field", exe: "/x/nodeshim-runc", file: `{"runtim":"x"}`, err: true},
		{name: "relative checkpoint dir", exe: "/x/nodeshim-runc", file: `{"checkpointDir":"c"}`, err: true},
		{name: "not JSON", exe: "/x/nodeshim-runc", file: `runtime = "runc"`, err: true},
		{name: "too large", exe: "/x/nodeshim-runc", file: `{"runtime":"` + strings.Repeat("a", maxConfigSize) + `"}`, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, "missing.json")
			if tc.file != "" {
				p = filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".json")
				if err := os.WriteFile(p, []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := LoadConfig(p, tc.exe)
			if tc.err {
				if !errors.Is(err, ErrConfig) {
					t.Fatalf("LoadConfig = %+v, %v; want ErrConfig", got, err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("LoadConfig = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestWrapperRoutes checks where each call goes: the runtime, the
// restoring binary, or nowhere (start of a restored container).
func TestWrapperRoutes(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	plain, withCkpt := filepath.Join(dir, "plain"), filepath.Join(dir, "ckpt")
	for b, ann := range map[string]map[string]string{plain: {"io.kubernetes.cri.container-name": "c"}, withCkpt: {AnnotationCheckpoint: "x.tar"}} {
		if err := os.MkdirAll(b, 0o700); err != nil {
			t.Fatal(err)
		}
		spec, _ := json.Marshal(map[string]any{"ociVersion": "1.2.0", "annotations": ann})
		if err := os.WriteFile(filepath.Join(b, "config.json"), spec, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	restored := filepath.Join(root, "restored")
	if err := os.MkdirAll(restored, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(restored, MarkerName), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		bin  string // "" when nothing is exec'd
		code int
	}{
		{"create without checkpoint", []string{"--root", root, "create", "--bundle", plain, "a"}, "/bin/runc", 1},
		{"create with checkpoint", []string{"--root", root, "create", "--bundle", withCkpt, "a"}, "/x/nodeshim-runc-restore", 1},
		{"create of a bundle without config", []string{"--root", root, "create", "--bundle", filepath.Join(dir, "none"), "a"}, "/bin/runc", 1},
		{"start of a fresh container", []string{"--root", root, "start", "a"}, "/bin/runc", 1},
		{"start of a restored container", []string{"--root", root, "start", "restored"}, "", 0},
		{"exec", []string{"--root", root, "exec", "restored"}, "/bin/runc", 1},
		{"bad command line", []string{"--root"}, "/bin/runc", 1},
		{"unreadable create naming a checkpoint", []string{"--root", root, "create", "--bundle", withCkpt, "--future-flag", "v", "a"}, "/x/nodeshim-runc-restore", 1},
		{"unreadable create without checkpoint", []string{"--root", root, "create", "--bundle=" + plain, "--future-flag", "v", "a"}, "/bin/runc", 1},
		{"delete of a restored container", []string{"--root", root, "delete", "--force", "restored"}, "/bin/runc", 1},
		{"start after delete", []string{"--root", root, "start", "restored"}, "/bin/runc", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			var gotArgs []string
			var stderr bytes.Buffer
			w := &Wrapper{Runtime: "/bin/runc", Restorer: "/x/nodeshim-runc" + RestoreSuffix, Stderr: &stderr,
				Exec: func(argv0 string, argv, _ []string) error {
					got, gotArgs = argv0, argv
					return errors.New("not really")
				}}
			code := w.Main(tc.args)
			if got != tc.bin || code != tc.code {
				t.Fatalf("Main(%q) execs %q, exits %d; want %q, %d", tc.args, got, code, tc.bin, tc.code)
			}
			if got != "" && strings.Join(gotArgs[1:], " ") != strings.Join(tc.args, " ") {
				t.Errorf("argv %q, want %q passed as is", gotArgs[1:], tc.args)
			}
		})
	}
}

func TestInstall(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "opt", "bin")
	for i, b := range Binaries {
		if err := os.WriteFile(filepath.Join(src, b), []byte{byte(i)}, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for round := 0; round < 2; round++ {
		// Twice: the second replaces what the first installed.
		if err := Install(src, dst); err != nil {
			t.Fatal(err)
		}
	}
	ents, err := os.ReadDir(dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != len(Binaries) {
		t.Errorf("%s holds %d files, want the %d binaries and nothing else", dst, len(ents), len(Binaries))
	}
	for i, b := range Binaries {
		fi, err := os.Stat(filepath.Join(dst, b))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(filepath.Join(dst, b))
		if fi.Mode().Perm() != 0o755 || !bytes.Equal(got, []byte{byte(i)}) {
			t.Errorf("%s: mode %v, content %v", b, fi.Mode(), got)
		}
	}
	if err := Install(src, "relative"); err == nil {
		t.Error("Install into a relative directory")
	}
	if err := Install(t.TempDir(), dst); err == nil {
		t.Error("Install without the binaries")
	}
}

func FuzzLoadConfig(f *testing.F) {
	f.Add([]byte(`{"runtime":"/usr/bin/runc","checkpointDir":"/c","maxBytes":1}`))
	f.Add([]byte(`{"workDir":"w"}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, "nodeshim-runc.json")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := LoadConfig(p, "/opt/nodeshim/bin/nodeshim-runc")
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("LoadConfig: %v is not ErrConfig", err)
			}
			return
		}
		if c.Runtime == "" || !filepath.IsAbs(c.CheckpointDir) || !filepath.IsAbs(c.WorkDir) {
			t.Fatalf("LoadConfig accepted %+v", c)
		}
	})
}
