#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The systemd units (packaging/systemd) pass `systemd-analyze verify` with
# no complaint at all (unknown keys are only warnings there, so any output
# fails the test). The copies checked name the built binaries.
# Usage: systemd_units_test.sh BUILD_DIR
set -euo pipefail
dir="$1/packaging/systemd/test"
units=("$dir"/*.service "$dir"/*.mount)
[ ${#units[@]} -eq 3 ] || { echo "expected 3 units in $dir"; exit 1; }
out=$(systemd-analyze verify --man=no "${units[@]}" 2>&1) || {
  echo "$out"
  exit 1
}
if [ -n "$out" ]; then
  echo "$out"
  exit 1
fi
# A unit with a mistake is caught (the check itself works).
bad=$(mktemp -d)
trap 'rm -rf "$bad"' EXIT
sed 's/^Restart=/Restrat=/' "$dir/sroute-controller.service" \
  >"$bad/sroute-controller.service"
out=$(systemd-analyze verify --man=no "$bad/sroute-controller.service" 2>&1) || true
case "$out" in
  *Restrat*) ;;
  *) echo "a misspelt key went unnoticed: $out"; exit 1 ;;
esac
echo "units verified: ${units[*]##*/}"
