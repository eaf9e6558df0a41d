#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The exerciser's long run: sroute-exercise (tools/exercise) on two files of
# a mounted volume under several rule kinds, OPS operations each (default
# 1 000 000), seeded; prints each kind's result line. Needs root (FUSE) and
# a build in build/ (or BUILD=DIR).
#
#   bench/exercise_long.sh                       # every kind, 1M ops each
#   OPS=100000 KINDS="byte_ranges" bench/exercise_long.sh
#   KINDS="cache_write_through cache_write_back" bench/exercise_long.sh
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$top/build}
ops=${OPS:-1000000}
seed=${SEED:-1}
kinds=${KINDS:-"byte_ranges scatter track_writes remote_server"}
work=$(mktemp -d /tmp/sroute-exercise-XXXXXX)
server_pid=""
fuse_pid=""
cleanup() {
  [ -z "$fuse_pid" ] || { fusermount3 -u "$work/mnt" 2>/dev/null || true; wait "$fuse_pid" 2>/dev/null || true; }
  [ -z "$server_pid" ] || { kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; }
  rm -rf "$work"
}
trap cleanup EXIT
head -c 32 /dev/urandom | base64 > "$work/secret"
chmod 600 "$work/secret"

for kind in $kinds; do
  rm -rf "$work/home" "$work/fast" "$work/mnt"
  mkdir -p "$work/home/d" "$work/fast" "$work/mnt"
  fast=$work/fast
  cache=off
  stage=
  case $kind in
    byte_ranges) rules='<*, r|w, //home/d/a[0:64K]> -> <IO, //fast/a>
<*, r|w, //home/d/a[128K:192K]> -> <IO, //fast/a.hi>
<*, r|w, //home/d/b[32K:100K]> -> <IO, //fast/b>
<*, r|w, //home/d/b[200K:300K]> -> <IO, //fast/b2>' ;;
    scatter) rules='<*, w, //home/d/*> -> <IO, //home/d/*>, <IO, //fast/s/*>'; cache=auto ;;
    track_writes) rules='<*, w, //home/d/a> -> track_writes(); <IO, //fast/ta>
<*, w, //home/d/b> -> track_writes(); <IO, //fast/tb>' ;;
    remote_server)
      rules='<*, r|w, //home/d/a[0:64K]> -> <IO, //fast/a>
<*, *, //home/d/b> -> <IO, //fast/b>'
      "$build/server/sroute-server" --root "$work/fast" --name fast \
        --secret-file "$work/secret" --listen 127.0.0.1:0 > "$work/server.out" 2>&1 &
      server_pid=$!
      for _ in $(seq 100); do grep -q "^listening" "$work/server.out" && break; sleep 0.05; done
      fast=$(sed -n 's/^listening on //p' "$work/server.out") ;;
    # Waypoints: a cache stage small enough to evict all the time.
    cache_write_through)
      rules='<*, *, //home/d/*> -> <IO, stage:c>'
      stage=c=cache:partition_bytes=192K ;;
    cache_write_back)
      rules='<*, *, //home/d/*> -> <IO, stage:c>'
      stage=c=cache:partition_bytes=192K,write_mode=write_back,dirty_limit_bytes=64K ;;
    *) echo "unknown kind $kind" >&2; exit 2 ;;
  esac
  echo "$rules" > "$work/k.rules"
  "$build/fuse/sroute-fuse" "$work/mnt" -f --backing "$work/home" \
    --endpoint "fast=$fast" --secret-file "$work/secret" \
    ${stage:+--stage "$stage"} \
    --rules "$work/k.rules" --kernel-cache "$cache" 2> "$work/fuse.log" &
  fuse_pid=$!
  for _ in $(seq 200); do mountpoint -q "$work/mnt" && break; sleep 0.05; done
  t0=$(date +%s)
  if out=$("$build/tools/exercise/sroute-exercise" --seed "$seed" --ops "$ops" \
      --shifts-may-be-refused "$work/mnt/d/a" "$work/mnt/d/b" 2>&1); then
    echo "$kind (kernel cache $cache): $(echo "$out" | head -1), $(( $(date +%s) - t0 )) s"
  else
    echo "$kind (kernel cache $cache): $out"
    cp "$work/fuse.log" "/tmp/sroute-exercise-$kind.log"
    echo "the volume's log: /tmp/sroute-exercise-$kind.log"
    exit 1
  fi
  if [ "$kind" = scatter ]; then
    cmp "$work/home/d/a" "$work/fast/s/a" && cmp "$work/home/d/b" "$work/fast/s/b" \
      && echo "  both copies identical"
  fi
  fusermount3 -u "$work/mnt"; wait "$fuse_pid" || true; fuse_pid=""
  if [ -n "$server_pid" ]; then kill "$server_pid"; wait "$server_pid" || true; server_pid=""; fi
done
