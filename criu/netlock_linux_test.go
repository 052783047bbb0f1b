package criu

import (
	"errors"
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
