#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# IO next to a stuck call (issue 26): a volume with default flags (FUSE over
# io_uring, the kernel's switch on as installed; --kernel-cache off) whose
# file "slow" is routed to an endpoint that stops answering (a directory on
# another FUSE volume whose daemon is SIGSTOPped). fio runs 4 KiB random
# reads and writes on another file of the volume, pinned to CPU 0, with and
# without two callers stuck on "slow" from the same CPU (a read and an
# fsync), alternated round by round. Prints the median IOPS and p99 of each
# and their ratio (target: at least 0.9).
#
#   sudo bench/stuck_call.sh                       # 3 rounds, 10 s per run
#   ROUNDS=1 RUNTIME=3 bench/stuck_call.sh         # a quick look
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/bench/fio_lib.sh"
rounds=${ROUNDS:-3}
runtime=${RUNTIME:-10}
size=${SIZE:-256m}
workloads=${WORKLOADS:-"randread4k-1 randwrite4k-1 randread4k-4 randwrite4k-4"}
build=${BUILD:-$top/build}
work=$(mktemp -d /tmp/sroute-stuck.XXXXXX)
inner_pid="" outer_pid="" stuck_pids=()
cleanup() {
  [ -n "$inner_pid" ] && kill -CONT "$inner_pid" 2>/dev/null || true
  for p in "${stuck_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  fusermount3 -u "$work/mnt" 2>/dev/null || true
  # The outer daemon holds files of the inner volume until it exits.
  [ -n "$outer_pid" ] && wait "$outer_pid" 2>/dev/null || true
  fusermount3 -u "$work/inner-mnt" 2>/dev/null || true
  wait 2>/dev/null || true
  restore_uring_switch
  rm -rf "$work"
}
trap cleanup EXIT
uring_switch_on "sroute"

mkdir -p "$work/backing" "$work/inner" "$work/inner-mnt" "$work/mnt"
echo "slow bytes" > "$work/inner/slow"
mounted() {
  for _ in $(seq 200); do mountpoint -q "$1" && return 0; sleep 0.05; done
  echo "$1 did not mount" >&2
  exit 1
}
"$build/fuse/sroute-fuse" "$work/inner-mnt" --backing "$work/inner" \
  --kernel-cache off --io-uring=off -f 2> "$work/inner.log" &
inner_pid=$!
mounted "$work/inner-mnt"
"$build/fuse/sroute-fuse" "$work/mnt" --backing "$work/backing" \
  --kernel-cache off --endpoint "stuck=$work/inner-mnt" \
  --rule '<*, *, //home/slow> -> <IO, //stuck/slow>' -f 2> "$work/outer.log" &
outer_pid=$!
mounted "$work/mnt"
cat "$work/mnt/slow" > /dev/null  # opened once at the endpoint
fio --name=prep --filename="$work/mnt/fio.dat" --size="$size" --rw=write \
  --bs=1m --ioengine=psync > /dev/null

echo "# $(date -Is) $(uname -r), $(nproc) CPUs; sroute $(git -C "$top" rev-parse --short HEAD); ROUNDS=$rounds RUNTIME=$runtime SIZE=$size"
echo "# $(head -1 "$work/outer.log")"

stick() {  # two callers stuck on "slow" from CPU 0
  kill -STOP "$inner_pid"
  taskset -c 0 cat "$work/mnt/slow" > /dev/null &
  stuck_pids+=($!)
  taskset -c 0 python3 -c "import os; f = os.open('$work/mnt/slow', os.O_RDWR); os.fsync(f)" &
  stuck_pids+=($!)
  sleep 0.5
  for p in "${stuck_pids[@]}"; do
    kill -0 "$p" 2>/dev/null || { echo "a stuck caller finished: the endpoint is not stuck" >&2; exit 1; }
  done
}
unstick() {
  kill -CONT "$inner_pid"
  for p in "${stuck_pids[@]}"; do wait "$p"; done
  stuck_pids=()
}

results=$work/results.txt
: > "$results"
for round in $(seq "$rounds"); do
  for wl in $workloads; do
    fio_workload "$wl"
    for mode in free stuck; do
      [ "$mode" = stuck ] && stick
      taskset -c 0 fio --name="$wl" --filename="$work/mnt/fio.dat" \
        --size="$size" --rw="$rw" --bs="$bs" --numjobs="$jobs" \
        --ioengine=psync --iodepth=1 --direct=1 --time_based \
        --runtime="$runtime" --group_reporting --output-format=json \
        > "$work/out.json" 2> /dev/null
      [ "$mode" = stuck ] && unstick
      echo "$round $wl $mode $(fio_figures "$work/out.json")" >> "$results"
    done
  done
done

python3 - "$results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    _, wl, mode, iops, _, _, p99 = line.split()
    rows.setdefault((wl, mode), []).append((float(iops), float(p99)))
print(f'{"workload":15} {"IOPS free":>10} {"IOPS stuck":>10} {"ratio":>6} {"p99 free":>9} {"p99 stuck":>9}')
for wl in dict.fromkeys(k[0] for k in rows):
    f = rows[(wl, "free")]
    s = rows[(wl, "stuck")]
    fi, si = statistics.median(x[0] for x in f), statistics.median(x[0] for x in s)
    fp, sp = statistics.median(x[1] for x in f), statistics.median(x[1] for x in s)
    r = si / fi
    print(f'{wl:15} {fi:10.0f} {si:10.0f} {r:6.2f} {fp:9.1f} {sp:9.1f}  {"met" if r >= 0.9 else "MISSED"}')
PY
