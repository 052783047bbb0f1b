# Kernel matrix: `make vmtest KERNELS="6.1 6.12"` boots each Debian kernel
# under QEMU (TCG) and runs the vmtest-tagged tests inside it, and the host
# suite of the packages that vmtest.HostSuite selects unless
# VMTEST_HOST_SUITE=false; see testenv/vmtest. Kernels, the build and the guests' artifacts (console.log,
# report.json) are kept under $(CACHE)/vmtest.

TEST_APT_PACKAGES += busybox-static cpio qemu-system-x86 debian-archive-keyring

KERNELS        ?= 6.1
# The kernels `make test` runs the matrix on, after the host suite, each
# with the host suite's portable tests (about 8 min of guest time per kernel
# under TCG, see BENCHMARKS.md); `make vmtest KERNELS=6.12` runs the newer
# kernel outside `make test`.
TEST_KERNELS   ?= 6.1
# Each guest's time from boot to power-off; a test binary gets 4/5 of it.
VMTEST_TIMEOUT ?= 40m
VMTEST_FLAGS   ?=
VMTEST_HOST_SUITE ?= true
VMTEST         := $(CACHE)/vmtest/bin/vmtest

.PHONY: vmtest vmtest-lint

$(VMTEST): go-deps $(wildcard testenv/vmtest/*.go testenv/vmtest/cmd/vmtest/*.go)
	$(GO) build -o $@ ./testenv/vmtest/cmd/vmtest

## vmtest-lint: go vet and staticcheck the files that only build with the vmtest tag
vmtest-lint: deps $(STATICCHECK)
	$(GO) vet -tags vmtest ./...
	$(STATICCHECK) -tags vmtest ./...

## vmtest: run the guest tests under each kernel of KERNELS (default 6.1)
vmtest: test-apt-deps vmtest-lint $(VMTEST)
	$(VMTEST) -root $(CURDIR) -cache $(CACHE)/vmtest -kernels "$(KERNELS)" \
		-timeout $(VMTEST_TIMEOUT) -ldflags '$(LDFLAGS)' -host-suite=$(VMTEST_HOST_SUITE) $(VMTEST_FLAGS)

# vmtest-faults boots real guests that are broken on purpose and checks that
# each breaks the run with the message that says why: a kernel panic, a
# missing test binary, a hung guest (killed after VMTEST_FAULT_TIMEOUT).
VMTEST_FAULT_TIMEOUT ?= 60s
VMTEST_FAULT_panic   := guest kernel panicked: Kernel panic - not syncing: Attempted to kill init!
VMTEST_FAULT_missing := test binary missing in the guest:
VMTEST_FAULT_hang    := guest hung: QEMU killed after the timeout (last test binary started:

.PHONY: vmtest-faults
## vmtest-faults: check that a panicking, incomplete or hung guest fails `make vmtest`
vmtest-faults: test-apt-deps $(VMTEST)
	@for f in panic missing hang; do \
		log=$(CACHE)/vmtest/fault-$$f.log; \
		if $(VMTEST) -root $(CURDIR) -cache $(CACHE)/vmtest -kernels "$(firstword $(TEST_KERNELS))" \
			-timeout $(VMTEST_FAULT_TIMEOUT) -host-suite=false -fault $$f >$$log 2>&1; then \
			echo "vmtest-faults: a guest with fault $$f passed: see $$log"; exit 1; fi; \
		case $$f in panic) want='$(VMTEST_FAULT_panic)';; missing) want='$(VMTEST_FAULT_missing)';; hang) want='$(VMTEST_FAULT_hang)';; esac; \
		if ! grep -qF -- "$$want" $$log; then echo "vmtest-faults: fault $$f failed without \"$$want\": see $$log"; exit 1; fi; \
		echo "vmtest-faults: fault $$f failed the run as it should: $$(grep -F -- "$$want" $$log | head -1 | sed 's/^vmtest: FAIL: //')"; \
	done
	@echo "vmtest-faults: panic, missing test binary and hang each fail the run with their message"
