package vmtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

func TestFirstDependency(t *testing.T) {
	cases := []struct {
		name, show, want, wantErr string
	}{
		{
			name: "bookworm metapackage",
			show: "Package: linux-image-amd64\nSource: linux-signed-amd64 (6.1.176+1)\nVersion: 6.1.176-1\n" +
				"Depends: linux-image-6.1.0-50-amd64 (= 6.1.176-1)\nDescription: Linux for 64-bit PCs (meta-package)\n\n",
			want: "linux-image-6.1.0-50-amd64",
		},
		{
			name: "trixie metapackage",
			show: "Package: linux-image-amd64\nDepends: linux-image-6.12.117+deb13-amd64 (= 6.12.117-1)\n",
			want: "linux-image-6.12.117+deb13-amd64",
		},
		{
			name: "alternatives and several dependencies",
			show: "Package: x\nDepends: kmod | linux-base (>= 4.3~), initramfs-tools\n",
			want: "kmod",
		},
		{
			name:    "Depends only in the second stanza",
			show:    "Package: x\nVersion: 1\n\nPackage: x\nDepends: y\n",
			wantErr: "no Depends field",
		},
		{name: "empty", show: "", wantErr: "no Depends field"},
		{name: "empty field", show: "Depends: (= 1)\n", wantErr: "names no package"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FirstDependency([]byte(tc.show))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("FirstDependency() = %q, %v, want error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("FirstDependency() = %q, %v, want %q", got, err, tc.want)
			}
		})
	}
}

func FuzzFirstDependency(f *testing.F) {
	f.Add("Package: linux-image-amd64\nDepends: linux-image-6.1.0-50-amd64 (= 6.1.176-1)\n")
	f.Add("Depends: a | b, c\n\nDepends: d\n")
	f.Add("Depends:\n")
	f.Fuzz(func(t *testing.T, show string) {
		name, err := FirstDependency([]byte(show))
		if err == nil && !dependsName.MatchString(name) {
			t.Fatalf("FirstDependency(%q) = %q, not a package name", show, name)
		}
	})
}

// fakeApt stands in for apt-get, apt-cache and the unpacking shell.
type fakeApt struct {
	depends string // what the metapackage depends on
	fail    string // the command that fails
	calls   [][]string
}

func (a *fakeApt) run(_ context.Context, dir, name string, args ...string) ([]byte, error) {
	a.calls = append(a.calls, append([]string{name}, args...))
	if name == a.fail {
		return nil, fmt.Errorf("%s: exit status 100: E: Failed to fetch", name)
	}
	last := args[len(args)-1]
	switch name {
	case "apt-get":
		if last != "update" {
			// download: leaves the .deb in the working directory.
			return nil, os.WriteFile(filepath.Join(dir, last+"_1.0_amd64.deb"), []byte("deb"), 0o644)
		}
	case "apt-cache":
		return []byte("Package: linux-image-amd64\nDepends: " + a.depends + " (= 1.0)\n"), nil
	case "sh":
		// dpkg-deb | tar: the last argument is the directory to unpack into.
		if err := os.MkdirAll(filepath.Join(last, "boot"), 0o755); err != nil {
			return nil, err
		}
		release := strings.TrimPrefix(a.depends, "linux-image-")
		if err := os.WriteFile(filepath.Join(last, "boot", "config-"+release), []byte("CONFIG_PSI=y\n"), 0o644); err != nil {
			return nil, err
		}
		return nil, os.WriteFile(filepath.Join(last, "boot", "vmlinuz-"+release), []byte("bzImage"), 0o644)
	}
	return nil, nil
}

func TestFetcherUsesPrivateAptAndCaches(t *testing.T) {
	cache := t.TempDir()
	apt := &fakeApt{depends: "linux-image-6.1.0-50-amd64"}
	f := &Fetcher{CacheDir: cache, Mirror: "http://deb.debian.org/debian", Keyring: "/usr/share/keyrings/debian-archive-keyring.gpg", Run: apt.run}
	k, err := LookupKernel("6.1")
	if err != nil {
		t.Fatal(err)
	}
	img, err := f.Fetch(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	pkg := img.Package
	if pkg != "linux-image-6.1.0-50-amd64" || img.Vmlinuz != filepath.Join(cache, "kernels", pkg, "vmlinuz") {
		t.Fatalf("Fetch() = %+v", img)
	}
	if b, err := os.ReadFile(img.Vmlinuz); err != nil || string(b) != "bzImage" {
		t.Fatalf("cached image: %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(img.Root, "boot", "config-6.1.0-50-amd64")); err != nil || string(b) != "CONFIG_PSI=y\n" {
		t.Fatalf("cached config: %q, %v", b, err)
	}
	if entries, err := os.ReadDir(filepath.Dir(img.Vmlinuz)); err != nil || len(entries) != 2 {
		t.Fatalf("kernel cache entry holds %v (%v), want vmlinuz and root only", entries, err)
	}
	sources, err := os.ReadFile(filepath.Join(cache, "apt", "bookworm", "sources.list"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main\n"; string(sources) != want {
		t.Errorf("sources.list = %q, want %q", sources, want)
	}
	var sawDownload bool
	for _, call := range apt.calls {
		if call[0] != "apt-get" && call[0] != "apt-cache" {
			continue
		}
		joined := strings.Join(call, " ")
		for _, want := range []string{
			"Dir::Etc::sourcelist=" + filepath.Join(cache, "apt", "bookworm", "sources.list"),
			"Dir::Etc::sourceparts=/dev/null",
			"Dir::State::Lists=" + filepath.Join(cache, "apt", "bookworm", "state", "lists"),
			"Dir::State::status=" + filepath.Join(cache, "apt", "bookworm", "state", "status"),
			"Dir::Cache=" + filepath.Join(cache, "apt", "bookworm", "cache"),
		} {
			if !strings.Contains(joined, want) {
				t.Errorf("%s: lacks %s", joined, want)
			}
		}
		if strings.HasSuffix(joined, "download linux-image-6.1.0-50-amd64") {
			sawDownload = true
		}
	}
	if !sawDownload {
		t.Errorf("no apt-get download of the image package in %q", apt.calls)
	}

	// A second fetch uses the cache and runs nothing.
	apt.calls = nil
	again, err := f.Fetch(context.Background(), k)
	if err != nil || again != img || len(apt.calls) != 0 {
		t.Fatalf("cached Fetch() = %+v, %v after %q", again, err, apt.calls)
	}
}

func TestFetcherFailures(t *testing.T) {
	cases := []struct {
		name     string
		apt      fakeApt
		wantText string
	}{
		{"archive unreachable", fakeApt{depends: "linux-image-6.1.0-50-amd64", fail: "apt-get"}, "cannot fetch kernel 6.1 (Debian bookworm from http://deb.debian.org/debian): apt-get: exit status 100"},
		{"suite moved to another series", fakeApt{depends: "linux-image-6.5.0-1-amd64"}, "not on a linux-image-6.1.0-* package"},
		{"image not unpacked", fakeApt{depends: "linux-image-6.1.0-50-amd64", fail: "sh"}, "cannot fetch kernel 6.1 (Debian bookworm from http://deb.debian.org/debian, linux-image-6.1.0-50-amd64)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &Fetcher{CacheDir: t.TempDir(), Mirror: "http://deb.debian.org/debian", Keyring: "k", Run: tc.apt.run}
			k, _ := LookupKernel("6.1")
			_, err := f.Fetch(context.Background(), k)
			if !errors.Is(err, ErrKernelFetch) || !strings.Contains(err.Error(), tc.wantText) {
				t.Fatalf("Fetch() error %v, want ErrKernelFetch with %q", err, tc.wantText)
			}
		})
	}
}

func TestCommandLine(t *testing.T) {
	got := commandLine("apt-get", []string{"-q", "-o", "Dir::Cache=/c", "-o", "APT::Sandbox::User=root", "download", "linux-image-6.1.0-50-amd64"})
	if want := "apt-get -q download linux-image-6.1.0-50-amd64"; got != want {
		t.Fatalf("commandLine() = %q, want %q", got, want)
	}
}

func TestLookupKernel(t *testing.T) {
	for _, label := range []string{"6.1", "6.12"} {
		if k, err := LookupKernel(label); err != nil || k.Label != label || k.Suite == "" {
			t.Errorf("LookupKernel(%s) = %+v, %v", label, k, err)
		}
	}
	if _, err := LookupKernel("5.10"); err == nil || !strings.Contains(err.Error(), "known: 6.1 6.12") {
		t.Errorf("LookupKernel(5.10) error %v, want the known labels", err)
	}
}

// TestKeepModules unpacks nothing: it lays out a merged-/usr package's
// module tree with an xz-compressed and a plain module and checks that only
// the wanted ones stay, uncompressed, under lib/modules with depmod's inputs.
func TestKeepModules(t *testing.T) {
	xz := testutil.RequireBinary(t, "xz")
	root := t.TempDir()
	tree := filepath.Join(root, "usr", "lib", "modules", "6.12.1-amd64")
	files := map[string]string{
		"kernel/drivers/net/veth.ko":        "veth module",
		"kernel/net/netfilter/nf_tables.ko": "nf_tables module",
		"kernel/drivers/net/wireguard.ko":   "not wanted",
		"modules.order":                     "kernel/drivers/net/veth.ko\n",
		"modules.builtin":                   "kernel/fs/ext4/ext4.ko\n",
	}
	for name, content := range files {
		p := filepath.Join(tree, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command(xz, filepath.Join(tree, "kernel/drivers/net/veth.ko")).CombinedOutput(); err != nil {
		t.Fatalf("xz: %v: %s", err, out)
	}
	if err := os.MkdirAll(filepath.Join(root, "boot"), 0o755); err != nil {
		t.Fatal(err)
	}
	mods := []Module{{"veth", "v"}, {"nf_tables", "n"}, {"overlay", "built in or absent"}}
	if err := keepModules(context.Background(), ExecRunner, root, mods); err != nil {
		t.Fatal(err)
	}
	var got []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(root, p)
		got = append(got, rel+": "+string(b))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"lib/modules/6.12.1-amd64/kernel/drivers/net/veth.ko: veth module",
		"lib/modules/6.12.1-amd64/kernel/net/netfilter/nf_tables.ko: nf_tables module",
		"lib/modules/6.12.1-amd64/modules.builtin: kernel/fs/ext4/ext4.ko\n",
		"lib/modules/6.12.1-amd64/modules.order: kernel/drivers/net/veth.ko\n",
		"lib/modules/nodeshim-guest-modules: veth\nnf_tables\noverlay\n",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("kept\n%q\nwant\n%q", got, want)
	}
}
