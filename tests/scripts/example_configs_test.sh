#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every host config in examples/configs parses, and its rules pass the rule
# checker against the host it describes without an error or a warning.
# usage: example_configs_test.sh SOURCE_DIR SROUTECTL
set -euo pipefail
src=$1 sroutectl=$2
n=0
for conf in "$src"/examples/configs/*.conf; do
  out=$("$sroutectl" rules check --config "$conf" 2>&1) || {
    echo "$conf: $out"
    exit 1
  }
  if ! grep -qE ' 0 errors, 0 warnings$' <<<"$out"; then
    echo "$conf: $out"
    exit 1
  fi
  n=$((n + 1))
done
[ "$n" -gt 0 ] || { echo "no config in $src/examples/configs"; exit 1; }
echo "$n example configs check clean"
