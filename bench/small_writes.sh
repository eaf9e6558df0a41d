#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Open-write-close of 4 KiB files as an unprivileged user (uid 65534, no
# CAP_FSETID) through two builds of sroute-fuse side by side, rounds
# alternating, over one local backing directory: what the first write of
# each open costs a build (bench/open_write_close.c). Prints, per build, the
# median over rounds of cycles/s, p50 and p99 (µs), then the ratio.
#
#   SROUTE_FUSE_BASE=/tmp/base/build/fuse/sroute-fuse bench/small_writes.sh
#   ROUNDS=7 N=20000 ...
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
base=${SROUTE_FUSE_BASE:?the other build: SROUTE_FUSE_BASE=PATH}
head=${SROUTE_FUSE:-$top/build/fuse/sroute-fuse}
rounds=${ROUNDS:-5}
n=${N:-10000}
work=$(mktemp -d /tmp/sroute-small-writes.XXXXXX)
trap 'for m in "$work"/mnt-*; do fusermount3 -u "$m" 2>/dev/null || true; done; rm -rf "$work"' EXIT
cc -O2 -Wall -o "$work/owc" "$top/bench/open_write_close.c"
chmod 755 "$work" "$work/owc"
for b in base head; do
  mkdir -p "$work/home-$b/d" "$work/mnt-$b"
  for i in $(seq 0 99); do : >"$work/home-$b/d/f$i"; done
  chown -R 65534:65534 "$work/home-$b/d"
done
"$base" "$work/mnt-base" --backing "$work/home-base" --kernel-cache off
"$head" "$work/mnt-head" --backing "$work/home-head" --kernel-cache off
declare -A results
for r in $(seq 1 "$rounds"); do
  for b in base head; do
    out=$(setpriv --reuid=65534 --regid=65534 --clear-groups \
      "$work/owc" "$work/mnt-$b/d" "$n")
    results[$b]+="$out"$'\n'
    echo "round $r $b: $out"
  done
done
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
for b in base head; do
  ops=$(awk '{print $1}' <<<"${results[$b]}" | grep . | median)
  p50=$(awk '{print $2}' <<<"${results[$b]}" | grep . | median)
  p99=$(awk '{print $3}' <<<"${results[$b]}" | grep . | median)
  echo "$b: ${ops} cycles/s, p50 ${p50} us, p99 ${p99} us (median of $rounds)"
  eval "ops_$b=$ops"
done
awk -v h="$ops_head" -v b="$ops_base" 'BEGIN {printf "head/base: %.2f\n", h / b}'
