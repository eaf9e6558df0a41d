#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's run command mounts this demo (scripts/demo.sh ->
# examples/volume/demo.sh): it must mount, and every command it then
# suggests must work as printed.
# usage: demo_volume_test.sh SOURCE_DIR SROUTE_FUSE SROUTECTL
set -euo pipefail
src=$1
export SROUTE_FUSE=$2 SROUTECTL=$3
d=$(mktemp -d)
trap 'fusermount3 -u "$d/demo/mnt" 2>/dev/null || true; rm -rf "$d"' EXIT
"$src/examples/volume/demo.sh" "$d/demo" | tee "$d/out"
# The suggestions: the lines between "Try:" and "Unmount with:".
sed -n '/^Try:$/,/^Unmount with:/p' "$d/out" | sed '1d;$d' > "$d/try.sh"
[ -s "$d/try.sh" ] || { echo "the demo suggests nothing to try"; exit 1; }
echo "== the suggested commands"
bash -x -euo pipefail "$d/try.sh"
