#!/bin/bash
# Turns the RECORD lines that TestGuestRecordTree logs in a `make vmtest` run
# (Debian 6.1 guest, pure cgroup v2) into the testdata/recorded-6.1 tree.
# Usage: record-guest-tree.sh VMTEST_LOG
set -euo pipefail
out=$(dirname "$0")/recorded-6.1
rm -rf "$out"
grep -oE 'RECORD [^ ]+ [A-Za-z0-9+/=]*' "$1" | while read -r _ rel data; do
	mkdir -p "$out/$(dirname "$rel")"
	printf '%s' "$data" | base64 -d > "$out/$rel"
done
find "$out" -type f | wc -l
