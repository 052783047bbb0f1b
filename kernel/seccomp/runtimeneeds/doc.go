// Package runtimeneeds measures what an OCI runtime's container init does
// under the container's own seccomp filter: the syscalls it makes between
// loading the filter and executing the container's process. A profile
// recorded from a running container never sees them (they happened before
// the recording), and a container whose profile lacks them does not start:
// runc 1.1's init fails with "error closing exec fds: ensure /proc/self/fd
// is on procfs: operation not permitted" when fstatfs is denied.
//
// The measurement is this node's, not a list kept by hand: Measure runs a
// trivial container (a static binary that exits at once) with the runtime
// binary itself, under a filter that allows everything, with and without
// no_new_privileges (runc and crun load the filter at a different point for
// each), and records with bpf.Recorder's FromFilterLoad window the
// syscalls of the processes that load a seccomp filter from that load to
// their execve. Cache keeps the result per runtime identity (path, version
// string, size and modification time of the binary, kernel release), so
// that a node measures each runtime once.
package runtimeneeds
