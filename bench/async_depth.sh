#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Asynchronous IO in flight through a volume: fio libaio 4 KiB random reads
# at queue depth 32 (kernel cache off) with the kernel's default of 12
# background requests per FUSE connection and with the 256 sroute-fuse asks
# for at INIT, set in turn through the connection's
# /sys/fs/fuse/connections/N/max_background on one mount, over a plain
# directory and over an emulated flash device (preset rackblox, dilation
# 50: 32 dies of 4 ms reads).
#
#   bench/async_depth.sh [OUT]   (RUNTIME=10 seconds per run)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results/async_depth}
runtime=${RUNTIME:-10}
fuse=build/fuse/sroute-fuse
[ -x "$fuse" ] || { echo "build first: scripts/build.sh build" >&2; exit 1; }
command -v fio >/dev/null || { echo "fio: scripts/install-bench-deps.sh" >&2; exit 1; }
mkdir -p "$out"
mountpoint -q /sys/fs/fuse/connections ||
  mount -t fusectl fusectl /sys/fs/fuse/connections
work=$(mktemp -d /tmp/sroute-ad-XXXXXX)
cleanup() {
  fusermount3 -u "$work/mnt" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
echo "BACKEND MAX_BACKGROUND IOPS P50_US P99_US" | tee "$out/results.txt"
for backend in dir flash; do
  rm -rf "$work/home" "$work/ssd" && mkdir -p "$work/home/db" "$work/ssd/db" "$work/mnt"
  args=()
  if [ $backend = flash ]; then
    args=(--endpoint "ssd=flash:$work/ssd,preset=rackblox,dilation=50"
      --rule '<*, *, //home/db/*> -> <IO, //ssd/db/*>')
  fi
  "$fuse" "$work/mnt" --backing "$work/home" --kernel-cache off "${args[@]}"
  dd if=/dev/urandom of="$work/mnt/db/data" bs=1M count=16 oflag=direct status=none
  dev=$(stat -c %d "$work/mnt")
  conn=/sys/fs/fuse/connections/$dev
  for depth in 12 256; do
    echo "$depth" > "$conn/max_background"
    echo $((depth * 3 / 4)) > "$conn/congestion_threshold"
    fio --name=r --filename="$work/mnt/db/data" --rw=randread --bs=4k \
      --direct=1 --ioengine=libaio --iodepth=32 --time_based \
      --runtime="$runtime" --norandommap --output-format=json \
      --output="$work/r.json" >/dev/null
    python3 - "$work/r.json" "$backend" "$depth" <<'PY' | tee -a "$out/results.txt"
import json, sys
r = json.load(open(sys.argv[1]))["jobs"][0]["read"]
p = r["clat_ns"]["percentile"]
print(f'{sys.argv[2]} {sys.argv[3]} {r["iops"]:.0f} '
      f'{p["50.000000"] / 1000:.0f} {p["99.000000"] / 1000:.0f}')
PY
  done
  fusermount3 -u "$work/mnt"
done
