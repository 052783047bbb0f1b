# The reporter (`nodeshim reporter`, shim/reporter) and the Kubernetes test
# control plane of internal/kubetest: a real kube-apiserver and a real etcd,
# started by the tests on 127.0.0.1 ports.
#
# kube-apiserver is built from the Go module proxy in its own tools module
# under $(KUBE_TOOLS_MOD), never in nodeshim's go.mod: k8s.io/kubernetes is
# pinned and every k8s.io/<staging> module it requires as v0.0.0 (its own
# go.mod maps them to ./staging, which a dependent module cannot see) is
# replaced with its published version of the same minor. About 4 minutes cold;
# the Go build cache makes later builds fast.
#
# etcd is Debian trixie's etcd-server, unpacked into $(ETCD_PREFIX) by
# deb-prefix (Makefile). Its binary is static Go and runs here as is.
# Both are needed by the tests only, never by `make run`.
#
# The tests find both through NODESHIM_KUBE_APISERVER and NODESHIM_ETCD.

KUBE_VERSION    := 1.33.4
KUBE_STAGING_VERSION := v0.33.4
KUBE_STAGING    := api apiextensions-apiserver apimachinery apiserver cli-runtime client-go \
	cloud-provider cluster-bootstrap code-generator component-base component-helpers \
	controller-manager cri-api cri-client csi-translation-lib dynamic-resource-allocation \
	endpointslice externaljwt kms kube-aggregator kube-controller-manager kube-proxy \
	kube-scheduler kubectl kubelet metrics mount-utils pod-security-admission \
	sample-apiserver sample-cli-plugin sample-controller
KUBE_TOOLS_MOD  := $(TOOLS)/kube-$(KUBE_VERSION)
KUBE_APISERVER  := $(TOOLS)/bin/kube-apiserver-$(KUBE_VERSION)
# What Kubernetes' own build stamps in (hack/lib/version.sh), so that
# --version and /version say which release this is.
KUBE_LDFLAGS    := -X k8s.io/component-base/version.gitVersion=v$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=$(word 1,$(subst ., ,$(KUBE_VERSION))) \
	-X k8s.io/component-base/version.gitMinor=$(word 2,$(subst ., ,$(KUBE_VERSION))) \
	-X k8s.io/component-base/version.gitTreeState=clean

ETCD_SUITE      := trixie
ETCD_PREFIX     := $(TOOLS)/etcd-$(ETCD_SUITE)
ETCD_APT        := $(CACHE)/apt-etcd-$(ETCD_SUITE)
ETCD            := $(ETCD_PREFIX)/usr/bin/etcd

TEST_DEPS += kube-testenv

export NODESHIM_KUBE_APISERVER := $(KUBE_APISERVER)
export NODESHIM_ETCD := $(ETCD)

.PHONY: kube-testenv
## kube-testenv: build kube-apiserver and unpack etcd for the reporter's tests
kube-testenv: $(KUBE_APISERVER) $(ETCD)

$(KUBE_APISERVER):
	@mkdir -p $(KUBE_TOOLS_MOD) $(TOOLS)/bin
	cd $(KUBE_TOOLS_MOD) && { \
		echo 'module nodeshim.local/kubetools'; echo; echo 'go 1.24'; echo; \
		echo 'require k8s.io/kubernetes v$(KUBE_VERSION)'; echo; \
		for m in $(KUBE_STAGING); do echo "replace k8s.io/$$m => k8s.io/$$m $(KUBE_STAGING_VERSION)"; done; \
	} > go.mod && { \
		echo '//go:build tools'; echo; echo 'package kubetools'; echo; \
		echo 'import _ "k8s.io/kubernetes/cmd/kube-apiserver"'; \
	} > tools.go
	cd $(KUBE_TOOLS_MOD) && $(GO) mod tidy
	cd $(KUBE_TOOLS_MOD) && $(GO) build -trimpath -ldflags '$(KUBE_LDFLAGS)' -o $@.tmp k8s.io/kubernetes/cmd/kube-apiserver
	$@.tmp --version
	mv $@.tmp $@

$(ETCD):
	$(call deb-prefix,$(ETCD_APT),$(ETCD_SUITE),etcd-server,$(ETCD_PREFIX),$(ETCD_PREFIX).tmp/usr/bin/etcd --version)
