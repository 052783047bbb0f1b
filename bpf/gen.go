package bpf

// The programs are built with clang for the BPF target against vmlinux.h,
// which `make generate` dumps from the running kernel's BTF into
// $BPF_INCLUDE. Run `make generate` rather than `go generate` directly.

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -target amd64 -cflags "-O2 -g -Wall -Werror -I${BPF_INCLUDE}" recorder c/recorder.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -target amd64 -type oom_event -cflags "-O2 -g -Wall -Werror -I${BPF_INCLUDE}" oom c/oom.bpf.c
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -target amd64 -type cgroup_stat -cflags "-O2 -g -Wall -Werror -I${BPF_INCLUDE}" cgroupstats c/cgroupstats.bpf.c
