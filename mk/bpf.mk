# bpf/: the eBPF programs are compiled ahead of time with bpf2go and the
# generated Go and .o files are committed, so building nodeshim needs no
# clang. `make generate` regenerates them: it installs clang, llvm (strip),
# libbpf-dev (bpf_helpers.h and friends) and bpftool from Debian, and dumps
# vmlinux.h from the running kernel's BTF into $(CACHE)/bpf.
#
# vmlinux.h is not committed: it is ~3 MB of this machine's kernel types,
# and CO-RE makes the choice of kernel irrelevant to the object files (field
# accesses are relocated against the target kernel's BTF at load time), so it
# is a build input regenerated on demand, like the compiler itself.

BPF_GEN_APT_PACKAGES := clang llvm libbpf-dev bpftool
BPF_INCLUDE := $(CACHE)/bpf
BPF_VMLINUX_BTF ?= /sys/kernel/btf/vmlinux

.PHONY: generate bpf-generate bpf-vmlinux

## generate: regenerate generated sources (bpf: bpf2go objects)
generate: bpf-generate

bpf-vmlinux:
	$(call apt-install,$(BPF_GEN_APT_PACKAGES))
	@mkdir -p $(BPF_INCLUDE)
	bpftool btf dump file $(BPF_VMLINUX_BTF) format c > $(BPF_INCLUDE)/vmlinux.h.tmp
	mv $(BPF_INCLUDE)/vmlinux.h.tmp $(BPF_INCLUDE)/vmlinux.h

bpf-generate: bpf-vmlinux
	cd bpf && BPF_INCLUDE=$(BPF_INCLUDE) $(GO) generate ./...

