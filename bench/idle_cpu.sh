#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Idle CPU of the daemons with default flags (issue 26): a volume whose home
# is one sroute-server on loopback, and a volume on a local directory, both
# mounted and unused for DURATION seconds (after a short burst of IO, so
# that every thread has started and any polling has had its chance to
# begin). Prints each daemon's CPU time over the window as a percentage of
# one core (target: under 0.5 %), and its threads.
#
#   sudo bench/idle_cpu.sh            # 60 s
#   DURATION=10 bench/idle_cpu.sh     # a quick look
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
duration=${DURATION:-60}
build=${BUILD:-$top/build}
work=$(mktemp -d /tmp/sroute-idle.XXXXXX)
hz=$(getconf CLK_TCK)
pids=()
cleanup() {
  for m in "$work"/mnt-*; do fusermount3 -u "$m" 2>/dev/null || true; done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

switch=/sys/module/fuse/parameters/enable_uring
echo "# $(date -Is) $(uname -r), $(nproc) CPUs; sroute $(git -C "$top" rev-parse --short HEAD); enable_uring=$(cat $switch 2>/dev/null || echo none)"

head -c 32 /dev/urandom | base64 > "$work/secret"
chmod 600 "$work/secret"
mkdir -p "$work/root" "$work/local" "$work/mnt-remote" "$work/mnt-local"
"$build/server/sroute-server" --root "$work/root" --listen 127.0.0.1:0 \
  --secret-file "$work/secret" > "$work/server.out" 2> "$work/server.log" &
server=$!
pids+=("$server")
addr=""
for _ in $(seq 200); do
  addr=$(sed -n 's/^listening on //p' "$work/server.out")
  [ -n "$addr" ] && break
  sleep 0.05
done
[ -n "$addr" ] || { echo "sroute-server did not start" >&2; exit 1; }
"$build/fuse/sroute-fuse" "$work/mnt-remote" --backing "$addr" \
  --secret-file "$work/secret" -f 2> "$work/remote.log" &
remote=$!
pids+=("$remote")
"$build/fuse/sroute-fuse" "$work/mnt-local" --backing "$work/local" -f \
  2> "$work/local.log" &
local_fuse=$!
pids+=("$local_fuse")
for m in "$work/mnt-remote" "$work/mnt-local"; do
  for _ in $(seq 200); do mountpoint -q "$m" && break; sleep 0.05; done
  mountpoint -q "$m" || { echo "$m did not mount" >&2; exit 1; }
  # A burst of IO first: every thread starts, polling may begin.
  for i in $(seq 200); do echo "$i" > "$m/f$((i % 8))"; cat "$m/f$((i % 8))" > /dev/null; done
done
sleep 1

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
declare -A before
for p in "$server" "$remote" "$local_fuse"; do before[$p]=$(ticks "$p"); done
sleep "$duration"
printf '%-32s %8s %8s  %s\n' daemon cpu_s "%core" threads
for p in "$server" "$remote" "$local_fuse"; do
  case $p in
    "$server") name="sroute-server" ;;
    "$remote") name="sroute-fuse (home on the server)" ;;
    *) name="sroute-fuse (local home)" ;;
  esac
  after=$(ticks "$p")
  threads=$(for t in /proc/$p/task/*; do cat "$t/comm"; done | sort | uniq -c |
    awk '{printf "%s%s x%s", sep, $2, $1; sep=", "}')
  python3 -c "
s = ($after - ${before[$p]}) / $hz
print(f'{\"$name\":32} {s:8.2f} {s / $duration * 100:7.2f}%  $threads')"
done
