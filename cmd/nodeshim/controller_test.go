package main

import (
	"errors"
	"strings"
	"testing"
)

func TestControllerUsage(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no namespace", []string{"controller"}, "--namespace"},
		{"no grace period", []string{"controller", "--namespace", "x", "--grace-period", "0s"}, "--grace-period"},
		{"negative sync period", []string{"controller", "--namespace", "x", "--sync-period", "-1s"}, "--sync-period"},
		{"an argument", []string{"controller", "--namespace", "x", "extra"}, "unknown command"},
	}
	t.Setenv("POD_NAMESPACE", "")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, tc.args...)
			var ee *exitError
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %s", err, tc.want)
			}
			if tc.name != "an argument" && (!errors.As(err, &ee) || ee.code != exitUsage) {
				t.Fatalf("err = %v, want a usage error (exit %d)", err, exitUsage)
			}
		})
	}
}

func TestIdentity(t *testing.T) {
	if id, err := identity("given"); err != nil || id != "given" {
		t.Errorf("identity(given) = %q, %v", id, err)
	}
	t.Setenv("POD_NAME", "nodeshim-controller-abc")
	a, err := identity("")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := identity("")
	if !strings.HasPrefix(a, "nodeshim-controller-abc_") || a == b {
		t.Errorf("identities %q and %q: want the pod name and a random suffix", a, b)
	}
}
