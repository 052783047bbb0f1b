package kernel

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nodeshim/nodeshim/kernel/capability"
)

func TestReadSysctl(t *testing.T) {
	proc := t.TempDir()
	writeFile(t, filepath.Join(proc, "sys/net/ipv4/tcp_rmem"), "4096\t131072\t6291456\n")
	writeFile(t, filepath.Join(proc, "sys/net/ipv4/ip_local_reserved_ports"), "\n")
	writeFile(t, filepath.Join(proc, "sys/net/ipv4/conf/eth0.100/rp_filter"), "2\n")
	if err := os.MkdirAll(filepath.Join(proc, "sys/net/ipv4/vs"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, sysctl string
		state        capability.SysctlState
		value        string
	}{
		{"present, tabs become spaces", "net.ipv4.tcp_rmem", capability.SysctlPresent, "4096 131072 6291456"},
		{"present and empty", "net.ipv4.ip_local_reserved_ports", capability.SysctlPresent, ""},
		{"slash form for dotted interface names", "net/ipv4/conf/eth0.100/rp_filter", capability.SysctlPresent, "2"},
		{"absent", "net.ipv4.tcp_keepalive_time", capability.SysctlAbsent, ""},
		{"absent under a present directory", "net.ipv4.vs.conn_reuse_mode", capability.SysctlAbsent, ""},
		{"a directory is not a sysctl", "net.ipv4.vs", capability.SysctlUnreadable, ""},
		{"relative components refused", "net/../../etc/passwd", capability.SysctlUnreadable, ""},
		{"empty component refused", "net..ipv4", capability.SysctlUnreadable, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := ReadSysctl(proc, tc.sysctl)
			if s.State != tc.state || s.Value != tc.value {
				t.Errorf("ReadSysctl(%q) = %+v, want %s %q", tc.sysctl, s, tc.state, tc.value)
			}
			if (s.State == capability.SysctlUnreadable) != (s.Error != "") {
				t.Errorf("error %q with state %s", s.Error, s.State)
			}
		})
	}
}

func TestSafeSysctlsMinKernels(t *testing.T) {
	want := map[string]capability.Version{
		"net.ipv4.ip_local_reserved_ports": capability.V(3, 16, 0),
		"net.ipv4.tcp_keepalive_time":      capability.V(4, 5, 0),
		"net.ipv4.tcp_keepalive_intvl":     capability.V(4, 5, 0),
		"net.ipv4.tcp_keepalive_probes":    capability.V(4, 5, 0),
		"net.ipv4.tcp_fin_timeout":         capability.V(4, 6, 0),
		"net.ipv4.tcp_syncookies":          capability.V(4, 6, 0),
		"net.ipv4.vs.conn_reuse_mode":      capability.V(4, 1, 0),
		"net.ipv4.tcp_rmem":                capability.V(4, 15, 0),
		"net.ipv4.tcp_wmem":                capability.V(4, 15, 0),
	}
	got := map[string]capability.Version{}
	for _, s := range SafeSysctls() {
		got[s.Name] = s.MinKernel
	}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s: min kernel %v, want %v", name, got[name], v)
		}
	}
}
