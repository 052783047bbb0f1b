# Kernel matrix: `make vmtest KERNELS="6.1 6.12"` boots each Debian kernel
# under QEMU (TCG) and runs the vmtest-tagged tests inside it; see
# internal/vmtest. Kernels, the build and the guests' artifacts (console.log,
# report.json) are kept under $(CACHE)/vmtest.

APT_PACKAGES += busybox-static cpio qemu-system-x86 debian-archive-keyring

KERNELS        ?= 6.1
# The kernels `make test` runs the matrix on, after the host suite.
TEST_KERNELS   ?= 6.1
VMTEST_TIMEOUT ?= 20m
VMTEST_FLAGS   ?=
VMTEST         := $(CACHE)/vmtest/bin/vmtest

.PHONY: vmtest vmtest-lint

$(VMTEST): go-deps $(wildcard internal/vmtest/*.go internal/vmtest/cmd/vmtest/*.go)
	$(GO) build -o $@ ./internal/vmtest/cmd/vmtest

## vmtest-lint: go vet and staticcheck the files that only build with the vmtest tag
vmtest-lint: deps $(STATICCHECK)
	$(GO) vet -tags vmtest ./...
	$(STATICCHECK) -tags vmtest ./...

## vmtest: run the guest tests under each kernel of KERNELS (default 6.1)
vmtest: apt-deps vmtest-lint $(VMTEST)
	$(VMTEST) -root $(CURDIR) -cache $(CACHE)/vmtest -kernels "$(KERNELS)" \
		-timeout $(VMTEST_TIMEOUT) -ldflags '$(LDFLAGS)' $(VMTEST_FLAGS)
