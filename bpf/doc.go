// Package bpf holds nodeshim's eBPF programs and their loaders: the syscall
// recorder, which turns the syscalls a workload makes into a seccomp
// profile, and the OOM watcher, which reports each OOM kill as a typed event.
//
// The programs are CO-RE C (c/*.bpf.c), compiled ahead of time by bpf2go;
// the generated Go and object files are committed, so building nodeshim
// needs no clang. `make generate` rebuilds them against a vmlinux.h dumped
// from the running kernel's BTF (mk/bpf.mk); vmlinux.h itself is not
// committed, since CO-RE makes the objects independent of the kernel it was
// dumped from: at load time cilium/ebpf relocates field accesses against
// /sys/kernel/btf/vmlinux, so one object serves 6.1 and 6.18 alike.
// Regenerating on an unchanged source gives byte-identical objects.
//
// The objects are built for amd64 only (bpf2go -target amd64).
//
// Requirements lists what the programs need from the kernel, each with a
// probe, for `nodeshim report`.
package bpf
