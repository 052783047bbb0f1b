// Package nodetest holds the node scenarios: tests, in files named
// *_node_test.go with the build constraint `//go:build nodevm`, that run
// inside the test node testenv/nodevm boots (pure cgroup v2, systemd,
// containerd 2.x with the systemd cgroup driver, runc, `nodeshim serve` as
// a systemd service), against the node's own services: crictl and ctr on
// containerd's socket, the nodeshim CLI and its API socket. On the host
// `go test ./...` compiles none of them; `make vmtest-node` builds them
// with the tag and runs them in the node.
package nodetest
