#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Waypoint routing through a cache: a storage server S1 holds the data, a
# volume mounts it, and two tenants' reads and writes go through one cache
# stage on the volume's host, each tenant in a partition of its own
# (alice 8 MiB, bob 2 MiB). Shows the hits and misses per partition, then
# a live resize, and cleans up (or, with --keep, leaves both running).
#   examples/cache/demo.sh [--keep] [DIR]     (as root; default DIR
#   /tmp/sroute-cache-demo)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${BUILD:-$top/build}
fuse=$build/fuse/sroute-fuse
server=$build/server/sroute-server
ctl=$build/tools/sroutectl/sroutectl
keep=0
if [[ ${1:-} == --keep ]]; then keep=1; shift; fi
dir=${1:-/tmp/sroute-cache-demo}

stop() {
  if mountpoint -q "$dir/mnt" 2>/dev/null; then fusermount3 -u "$dir/mnt"; fi
  if [[ -f $dir/server.pid ]]; then
    kill "$(cat "$dir/server.pid")" 2>/dev/null || true
    rm -f "$dir/server.pid"
  fi
}
stop
rm -rf "$dir"
mkdir -p "$dir/s1/data" "$dir/mnt"
chmod 755 "$dir" "$dir/s1" "$dir/s1/data"
head -c 32 /dev/urandom | base64 > "$dir/secret"
chmod 600 "$dir/secret"

# The server prints "listening on HOST:PORT" first.
"$server" --root "$dir/s1" --name S1 --listen 127.0.0.1:0 \
  --secret-file "$dir/secret" > "$dir/server.log" 2>&1 &
echo $! > "$dir/server.pid"
for _ in $(seq 100); do
  grep -q '^listening on' "$dir/server.log" 2>/dev/null && break
  sleep 0.05
done
addr=$(sed -n 's/^listening on //p' "$dir/server.log")
[[ -n $addr ]] || { echo "demo: the server did not start" >&2; cat "$dir/server.log"; exit 1; }
[[ $keep == 1 ]] || trap stop EXIT

# alice is root here, bob is uid 65534 (nobody); both route their IO to the
# data/ directory through stage cacheA, which hands it back to go on to S1.
"$fuse" "$dir/mnt" --backing "$addr" --secret-file "$dir/secret" \
  --kernel-cache off --control "$dir/control.sock" \
  --tenant alice=uid:0 --tenant bob=uid:65534 \
  --stage "cacheA=cache:partition=alice/8M,partition=bob/2M,partition_bytes=0" \
  --rule '<alice, r|w, //home/data/*> -> <IO, stage:cacheA>' \
  --rule '<bob, r|w, //home/data/*> -> <IO, stage:cacheA>'
for _ in $(seq 100); do mountpoint -q "$dir/mnt" && break; sleep 0.05; done
mountpoint -q "$dir/mnt" || { echo "demo: the volume did not mount" >&2; exit 1; }

m=$dir/mnt
echo "volume at $m, its home on sroute-server S1 at $addr ($dir/s1)"
head -c 4194304 /dev/urandom > "$m/data/big"    # 4 MiB, written by alice
head -c 1048576 /dev/urandom > "$m/data/small"  # 1 MiB
chmod 644 "$m/data/big" "$m/data/small"
as_bob() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }

for round in 1 2; do
  cat "$m/data/big" > /dev/null                  # alice: 4 MiB fits in 8 MiB
  as_bob cat "$m/data/big" > /dev/null           # bob: 4 MiB, 2 MiB partition
  as_bob cat "$m/data/small" > /dev/null         # bob: 1 MiB fits
done
cmp -s "$m/data/big" "$dir/s1/data/big" && echo "data/big reads back as S1 holds it"
echo
echo "after two rounds of reads (alice: big; bob: big and small):"
"$ctl" --host "unix:$dir/control.sock" stages ls | sed 's/^/  /'

echo
echo "resize bob's partition live to 8 MiB, read again:"
"$ctl" --host "unix:$dir/control.sock" stages set cacheA partition=bob/8M > /dev/null
for round in 1 2; do as_bob cat "$m/data/big" > /dev/null; done
"$ctl" --host "unix:$dir/control.sock" stages ls | sed 's/^/  /'
if [[ $keep == 1 ]]; then
  cat <<TXT

Left running: the volume at $m, the server (pid $(cat "$dir/server.pid")).
  $ctl --host unix:$dir/control.sock stages ls
  $ctl --host unix:$dir/control.sock stats
Stop: fusermount3 -u $m; kill \$(cat $dir/server.pid)
TXT
fi
