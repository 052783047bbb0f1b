# The kubectl plugin as krew installs plugins (deploy/krew): `make
# krew-plugin` writes its archive and manifest into dist/; deploy/krew's
# test installs them with krew itself, built here once per version.

KREW_VERSION := v0.4.3
KREW         := $(TOOLS)/bin/krew-$(KREW_VERSION)
export NODESHIM_KREW := $(KREW)
TEST_DEPS += $(KREW)
# The plugin's version in its manifest, and where its archive is published.
PLUGIN_VERSION  ?= v0.1.0
PLUGIN_URI_BASE ?= https://github.com/nodeshim/nodeshim/releases/download/$(PLUGIN_VERSION)

.PHONY: krew-plugin

$(KREW):
	rm -rf $(TOOLS)/krew.tmp && mkdir -p $(TOOLS)/krew.tmp $(TOOLS)/bin
	GOBIN=$(TOOLS)/krew.tmp $(GO) install -trimpath sigs.k8s.io/krew/cmd/krew@$(KREW_VERSION)
	mv $(TOOLS)/krew.tmp/krew $@ && rmdir $(TOOLS)/krew.tmp

## krew-plugin: the kubectl plugin's krew archive and manifest in dist/ (PLUGIN_VERSION, PLUGIN_URI_BASE)
krew-plugin: build
	$(GO) run ./deploy/krew/cmd/krew-plugin -version $(PLUGIN_VERSION) -binary $(dir $(BIN))kubectl-nodeshim \
		-uri-base $(PLUGIN_URI_BASE) -out dist
