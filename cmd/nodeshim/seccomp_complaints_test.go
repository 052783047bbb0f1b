package main

import (
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/golden"
)

func TestComplaintsTable(t *testing.T) {
	at := time.Date(2026, 11, 28, 3, 45, 12, 0, time.UTC)
	tests := []struct {
		name string
		c    status.SeccompComplaints
	}{
		{"none", status.SeccompComplaints{Watching: true}},
		{"not-watched", status.SeccompComplaints{Reason: "open /dev/kmsg: operation not permitted"}},
		{"some", status.SeccompComplaints{Watching: true, Total: 5, Suppressed: 12, Containers: []status.ContainerComplaints{
			{Namespace: "shop", Pod: "web-0", Container: "worker", ContainerID: "c1", Syscalls: []status.SyscallComplaint{
				{Name: "chdir", Count: 2, First: at, Last: at}, {Name: "umask", Count: 1, First: at, Last: at}}},
			{Comm: "mkdir", Unresolved: "process 7 exited before its cgroups were read", Syscalls: []status.SyscallComplaint{
				{Name: "mkdir", Count: 2, First: at, Last: at}}},
		}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			golden.Check(t, "seccomp-complaints-"+tc.name+".txt", []byte(complaintsTable(&tc.c)))
		})
	}
}
