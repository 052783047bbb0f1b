# Kernel matrix: `make vmtest KERNELS="6.1 6.12"` boots each Debian kernel
# under QEMU (TCG) and runs the vmtest-tagged tests inside it; see
# internal/vmtest. Kernels, the build and the guests' artifacts (console.log,
# report.json) are kept under $(CACHE)/vmtest.

APT_PACKAGES += busybox-static cpio gzip qemu-system-x86 dpkg

KERNELS        ?= 6.1
VMTEST_TIMEOUT ?= 20m
VMTEST_FLAGS   ?=
VMTEST         := $(CACHE)/vmtest/bin/vmtest

.PHONY: vmtest vmtest-vet

$(VMTEST): go-deps $(wildcard internal/vmtest/*.go internal/vmtest/cmd/vmtest/*.go)
	$(GO) build -o $@ ./internal/vmtest/cmd/vmtest

## vmtest-vet: go vet the files that only build with the vmtest tag
vmtest-vet: deps
	$(GO) vet -tags vmtest ./...

## vmtest: run the guest tests under each kernel of KERNELS (default 6.1)
vmtest: apt-deps vmtest-vet $(VMTEST)
	$(VMTEST) -root $(CURDIR) -cache $(CACHE)/vmtest -kernels "$(KERNELS)" \
		-timeout $(VMTEST_TIMEOUT) -ldflags '$(LDFLAGS)' $(VMTEST_FLAGS)
