#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Calibrates the emulated flash presets for the qos stage (issue 48): a
# volume whose db/ goes to a flash endpoint (through a qos stage with no
# tenant: nothing limited), and `sroutectl qos calibrate` through it. The
# tables land in examples/qos/flash-PRESET-dDILATION.txt; their last line
# is the stage options (`--stage q=qos:OPTIONS`).
#
#   bench/qos_calibrate.sh [PRESET:DILATION...]   (default rackblox:50 rackblox:10)
set -euo pipefail
cd "$(dirname "$0")/.."
fuse=build/fuse/sroute-fuse
ctl=build/tools/sroutectl/sroutectl
for x in "$fuse" "$ctl"; do
  [ -x "$x" ] || { echo "build first: scripts/build.sh build ($x)" >&2; exit 1; }
done
work=$(mktemp -d /tmp/sroute-qc-XXXXXX)
cleanup() {
  fusermount3 -u "$work/mnt" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
[ $# -gt 0 ] || set -- rackblox:50 rackblox:10
for pd in "$@"; do
  preset=${pd%%:*} dilation=${pd#*:}
  # The file: 16 MiB (4 096 pages over 32 dies); the small preset holds 1 MiB.
  size=16777216 depth=64
  [ "$preset" = small ] && size=1048576 depth=16
  rm -rf "$work/home" "$work/ssd" && mkdir -p "$work/home/db" "$work/ssd/db" "$work/mnt"
  "$fuse" "$work/mnt" --backing "$work/home" --kernel-cache off \
    --endpoint "ssd=flash:$work/ssd,preset=$preset,dilation=$dilation" \
    --stage q=qos --rule '<*, *, //home/db/*> -> <IO, stage:q>' \
    --rule '<stage:q, *, //home/db/*> -> <IO, //ssd/db/*>'
  out=examples/qos/flash-$preset-d$dilation.txt
  {
    echo "# bench/qos_calibrate.sh $pd on $(nproc) cores, $(date -u +%F):"
    echo "# sroutectl qos calibrate --size $size --depth $depth --loads 8 --warmup-ms 2000"
    "$ctl" qos calibrate "$work/mnt/db/calibration" --size "$size" \
      --depth "$depth" --loads 8 --warmup-ms 2000
  } > "$out.new"
  mv "$out.new" "$out"
  fusermount3 -u "$work/mnt"
  tail -1 "$out"
done
