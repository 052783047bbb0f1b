package criu

import (
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nodeshim/nodeshim/kernel/capability"
)

// treeHost maps the host's absolute paths into a directory of the test.
type treeHost string

func (h treeHost) Path(p string) string { return filepath.Join(string(h), p) }

func (treeHost) Describe(context.Context) capability.Node { return capability.Node{} }

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(name, ".gz") {
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			zw := gzip.NewWriter(f)
			if _, err := zw.Write([]byte(body)); err != nil {
				t.Fatal(err)
			}
			if err := zw.Close(); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if body == "<dir>" {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestConntrackModuleState(t *testing.T) {
	const rel = "6.12.0-1-amd64"
	tree := "/lib/modules/" + rel
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  moduleState
	}{
		{"loaded per /proc/modules", map[string]string{
			"/proc/modules":   "nfnetlink 20480 3 nf_conntrack_netlink, Live 0x0\nnf_conntrack_netlink 57344 0 - Live 0x0\n",
			"/proc/config.gz": "CONFIG_NF_CT_NETLINK=m\n",
		}, moduleLoaded},
		{"only nfnetlink loaded, module on disk (the Debian node)", map[string]string{
			"/proc/modules":           "nfnetlink 20480 0 - Live 0x0\n",
			"/boot/config-" + rel:     "CONFIG_NETFILTER_NETLINK=m\nCONFIG_NF_CT_NETLINK=m\n",
			tree + "/modules.dep":     "kernel/net/netfilter/nf_conntrack_netlink.ko.xz: kernel/net/netfilter/nfnetlink.ko.xz\n",
			tree + "/modules.builtin": "kernel/net/ipv4/tcp_cubic.ko\n",
		}, moduleNotLoaded},
		{"in /sys/module", map[string]string{
			"/sys/module/nf_conntrack_netlink": "<dir>",
		}, moduleLoaded},
		{"listed in modules.builtin", map[string]string{
			tree + "/modules.builtin": "kernel/net/netfilter/nf_conntrack_netlink.ko\n",
		}, moduleBuiltin},
		{"built in per /proc/config.gz", map[string]string{
			"/proc/config.gz": "CONFIG_NF_CONNTRACK=y\nCONFIG_NF_CT_NETLINK=y\n",
		}, moduleBuiltin},
		{"not set in config", map[string]string{
			"/proc/config.gz": "CONFIG_NF_CONNTRACK=y\n# CONFIG_NF_CT_NETLINK is not set\n",
		}, moduleNotBuilt},
		{"only a module tree", map[string]string{
			tree + "/modules.dep": "kernel/net/netfilter/nf_conntrack_netlink.ko: \n",
		}, moduleNotLoaded},
		{"a name that only starts alike", map[string]string{
			"/proc/modules": "nf_conntrack_netlink_x 1 0 - Live 0x0\n",
		}, moduleUnknown},
		{"nothing known", map[string]string{}, moduleUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, root, tc.files)
			if got := conntrackModuleState(treeHost(root), rel); got != tc.want {
				t.Errorf("state = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestConntrackFinding(t *testing.T) {
	for _, tc := range []struct {
		name    string
		state   moduleState
		asked   bool
		err     error
		verdict capability.Verdict
		has     []string
	}{
		{"answered", moduleBuiltin, true, nil, capability.Supported, []string{"IPCTNL_MSG_CT_GET_STATS_CPU", "built in"}},
		{"answered, state unknown", moduleUnknown, true, nil, capability.Supported, []string{"answered"}},
		{"EINVAL from nfnetlink", moduleLoaded, true, fmt.Errorf("IPCTNL_MSG_CT_GET_STATS_CPU: %w", syscall.EINVAL), capability.Unsupported, []string{"modprobe nf_conntrack_netlink", "-22 reported by netlink"}},
		{"ENOENT", moduleUnknown, true, syscall.ENOENT, capability.Unsupported, []string{"modprobe nf_conntrack_netlink"}},
		{"EOPNOTSUPP", moduleUnknown, true, syscall.EOPNOTSUPP, capability.Unsupported, []string{"modprobe nf_conntrack_netlink"}},
		{"no nfnetlink", moduleUnknown, true, fmt.Errorf("socket NETLINK_NETFILTER: %w", syscall.EPROTONOSUPPORT), capability.Unsupported, []string{"nfnetlink", "modprobe nf_conntrack_netlink"}},
		{"unprivileged", moduleLoaded, true, syscall.EPERM, capability.Unknown, []string{"CAP_NET_ADMIN"}},
		{"timeout", moduleLoaded, true, syscall.EAGAIN, capability.Unknown, []string{"could not be asked"}},
		{"module not loaded, not asked", moduleNotLoaded, false, nil, capability.Unsupported, []string{"not loaded", "modprobe nf_conntrack_netlink", "modules-load.d", "would load it"}},
		{"not built", moduleNotBuilt, false, nil, capability.Unsupported, []string{"CONFIG_NF_CT_NETLINK"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := conntrackFinding(tc.state, tc.asked, tc.err)
			if f.Verdict != tc.verdict {
				t.Errorf("verdict %s, want %s (%s)", f.Verdict, tc.verdict, f.Evidence)
			}
			for _, s := range tc.has {
				if !strings.Contains(f.Evidence, s) {
					t.Errorf("evidence %q lacks %q", f.Evidence, s)
				}
			}
		})
	}
}

// TestConntrackProbeNeverAsksWhatWouldLoad checks that a probe on a node
// with the module on disk and not loaded decides without asking the kernel,
// which would load it.
func TestConntrackProbeNeverAsksWhatWouldLoad(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"/proc/modules":   "nfnetlink 20480 0 - Live 0x0\n",
		"/proc/config.gz": "CONFIG_NF_CT_NETLINK=m\n",
	})
	asked := false
	f := probeConntrack(treeHost(root), func() error { asked = true; return nil })
	if asked || f.Verdict != capability.Unsupported {
		t.Errorf("asked %v, verdict %s (%s); want no request and Unsupported", asked, f.Verdict, f.Evidence)
	}
	root = t.TempDir()
	writeTree(t, root, map[string]string{"/proc/config.gz": "CONFIG_NF_CT_NETLINK=y\n"})
	f = probeConntrack(treeHost(root), func() error { asked = true; return syscall.EINVAL })
	if !asked || f.Verdict != capability.Unsupported {
		t.Errorf("built in: asked %v, verdict %s (%s); want the kernel asked and its EINVAL Unsupported", asked, f.Verdict, f.Evidence)
	}
}

// FuzzListsModule checks that any module list parses without panicking and
// that a line naming the module is always found.
func FuzzListsModule(f *testing.F) {
	f.Add([]byte("nf_conntrack_netlink 57344 0 - Live 0x0\n"), true)
	f.Add([]byte("kernel/net/netfilter/nf_conntrack_netlink.ko.xz: kernel/net/netfilter/nfnetlink.ko.xz\n"), false)
	f.Add([]byte(":\n.ko\n\x00"), false)
	f.Fuzz(func(t *testing.T, b []byte, names bool) {
		listsModule(b, ConntrackModule, names)
		line := "nf-conntrack_netlink 1 0 - Live 0x0"
		if !names {
			line = "kernel/nf_conntrack_netlink.ko:"
		}
		if !listsModule(append(append([]byte(line), '\n'), b...), ConntrackModule, names) {
			t.Errorf("%q first, then %q: not found", line, b)
		}
	})
}

func TestConntrackWithCriuCheck(t *testing.T) {
	check := capability.Findingf(capability.Supported, "criu check: Looks good.")
	for _, tc := range []struct {
		ct   capability.Finding
		want capability.Verdict
		has  string
	}{
		{conntrackFinding(moduleBuiltin, true, nil), capability.Supported, "Looks good.; ctnetlink answered"},
		{conntrackFinding(moduleNotLoaded, false, nil), capability.Unsupported, "Looks good.; but nf_conntrack_netlink built as a module, not loaded"},
		{conntrackFinding(moduleLoaded, true, syscall.EINVAL), capability.Unsupported, "modprobe nf_conntrack_netlink"},
		{conntrackFinding(moduleLoaded, true, syscall.EPERM), capability.Supported, "container dumps may fail"},
	} {
		f := withConntrack(check, tc.ct)
		if f.Verdict != tc.want || !strings.Contains(f.Evidence, tc.has) {
			t.Errorf("with %s %q: %s %q, want %s containing %q", tc.ct.Verdict, tc.ct.Evidence, f.Verdict, f.Evidence, tc.want, tc.has)
		}
	}
}
