package kernel

import (
	"os"
	"path/filepath"
	"testing"
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
		state        SysctlState
		value        string
	}{
		{"present, tabs become spaces", "net.ipv4.tcp_rmem", SysctlPresent, "4096 131072 6291456"},
		{"present and empty", "net.ipv4.ip_local_reserved_ports", SysctlPresent, ""},
		{"slash form for dotted interface names", "net/ipv4/conf/eth0.100/rp_filter", SysctlPresent, "2"},
		{"absent", "net.ipv4.tcp_keepalive_time", SysctlAbsent, ""},
		{"absent under a present directory", "net.ipv4.vs.conn_reuse_mode", SysctlAbsent, ""},
		{"a directory is not a sysctl", "net.ipv4.vs", SysctlUnreadable, ""},
		{"relative components refused", "net/../../etc/passwd", SysctlUnreadable, ""},
		{"empty component refused", "net..ipv4", SysctlUnreadable, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := ReadSysctl(proc, tc.sysctl)
			if s.State != tc.state || s.Value != tc.value {
				t.Errorf("ReadSysctl(%q) = %+v, want %s %q", tc.sysctl, s, tc.state, tc.value)
			}
			if (s.State == SysctlUnreadable) != (s.Error != "") {
				t.Errorf("error %q with state %s", s.Error, s.State)
			}
		})
	}
}

func TestSafeSysctlsMinKernels(t *testing.T) {
	want := map[string]Version{
		"net.ipv4.ip_local_reserved_ports": V(3, 16, 0),
		"net.ipv4.tcp_keepalive_time":      V(4, 5, 0),
		"net.ipv4.tcp_keepalive_intvl":     V(4, 5, 0),
		"net.ipv4.tcp_keepalive_probes":    V(4, 5, 0),
		"net.ipv4.tcp_fin_timeout":         V(4, 6, 0),
		"net.ipv4.tcp_syncookies":          V(4, 6, 0),
		"net.ipv4.vs.conn_reuse_mode":      V(4, 1, 0),
		"net.ipv4.tcp_rmem":                V(4, 15, 0),
		"net.ipv4.tcp_wmem":                V(4, 15, 0),
	}
	got := map[string]Version{}
	for _, s := range SafeSysctls() {
		got[s.Name] = s.MinKernel
	}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s: min kernel %v, want %v", name, got[name], v)
		}
	}
}
