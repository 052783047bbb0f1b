package criu

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
)

// TestNetworkLock: iptables where CRIU can run iptables-restore, nftables
// (through libnftables) where it cannot, as in nodeshim's image.
func TestNetworkLock(t *testing.T) {
	for _, tc := range []struct {
		name  string
		found bool
		want  rpc.CriuNetworkLockMethod
	}{
		{name: "iptables-restore on PATH", found: true, want: rpc.CriuNetworkLockMethod_IPTABLES},
		{name: "no iptables-restore", found: false, want: rpc.CriuNetworkLockMethod_NFTABLES},
	} {
		t.Run(tc.name, func(t *testing.T) {
			look := func(name string) (string, error) {
				if name != "iptables-restore" {
					t.Errorf("looked up %q", name)
				}
				if tc.found {
					return "/usr/sbin/" + name, nil
				}
				return "", errors.New("not found")
			}
			if got := networkLock(look); got == nil || *got != tc.want {
				t.Errorf("networkLock = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestLogErrors: CRIU's Error lines and what the programs it ran printed
// (lines stamped neither by CRIU nor by its parasite), without the
// RLIMIT_NOFILE noise; the last lines when there is neither.
func TestLogErrors(t *testing.T) {
	for _, tc := range []struct {
		name, log, want string
	}{
		{
			name: "criu errors",
			log:  "(00.1) Lock network\n(00.2) Error (criu/cr-dump.c:2111): Dumping FAILED.\n",
			want: "(00.2) Error (criu/cr-dump.c:2111): Dumping FAILED.",
		},
		{
			name: "a program's own line",
			log: "(00.1) Dumping tmpfs\npie: 26: Daemon waits for command\ntar: ./x: Cannot open: Permission denied\n" +
				"(00.2) Error (criu/util.c:656): exited, status=2\n",
			want: "tar: ./x: Cannot open: Permission denied; (00.2) Error (criu/util.c:656): exited, status=2",
		},
		{
			name: "rlimit noise",
			log:  "(00.0) Error (criu/rlimit.c:1): Can't setup RLIMIT_NOFILE for self\n(00.1) a\n(00.2) b\n(00.3) c\n",
			want: "(00.1) a; (00.2) b; (00.3) c",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "dump.log")
			if err := os.WriteFile(p, []byte(tc.log), 0o600); err != nil {
				t.Fatal(err)
			}
			if got := logErrors(p); got != tc.want {
				t.Errorf("logErrors = %q, want %q", got, tc.want)
			}
		})
	}
}
