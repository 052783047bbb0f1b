# The shim daemon (shim/...).
#
# `make run` serves in the foreground on the embedded default configuration,
# with its state (root dir, API socket, config checkpoints, report cache) and
# its lock under .state/ in the source tree rather than in /var: it prints
# the capability report, then one line per condition transition. Stop it
# with Ctrl-C. `nodeshim status --root-dir .state/root` queries it.
STATE_DIR ?= $(CURDIR)/.state
RUN_ARGS  ?= serve --root-dir $(STATE_DIR)/root --lock-file $(STATE_DIR)/nodeshim.lock
