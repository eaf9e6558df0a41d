#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Burst absorption (issue 25): the same seeded Exchange-like workload
# (bench/burst_driver.cc) through one FUSE volume onto three storage
# servers, once with the controller running no app and once running
# tail_latency; the tables side by side in OUT/results.txt and the write
# latency CDF of the bursting flow in OUT/cdf_max.png.
#
# Each server keeps its files on an emulated flash device of its own
# (endpoints/flash_model.h: 2 dies, 4 ms reads, 8 ms programs, a 4-page write buffer:
# 250 writes/s and 500 reads/s), so a server's capacity is its device's and
# not this machine's cores: the bursting flow (max, on S1) asks for more
# writes than S1's device takes (300/s), while S2's and S3's devices have
# room for half of them each (the app runs with spread=2).
#
# After the tables: the reclaim's window (from the controller's log), its
# MB/s, and every flow's p99 inside that window in both runs.
#
#   bench/tail_latency.sh [OUT] [burst_driver arguments...]
#   APP_ARGS=... bench/tail_latency.sh ...   (the app's arguments)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results/tail_latency}
shift || true
bin=build
server=$bin/server/sroute-server
controller=$bin/controller/sroute-controller
fuse=$bin/fuse/sroute-fuse
ctl=$bin/tools/sroutectl/sroutectl
driver=$bin/bench/burst_driver
for x in "$server" "$controller" "$fuse" "$ctl" "$driver"; do
  [ -x "$x" ] || { echo "build first: scripts/build.sh build ($x)" >&2; exit 1; }
done
if ! command -v gnuplot >/dev/null; then
  apt-get install -y -qq gnuplot-nox >/dev/null
fi
mkdir -p "$out/data"
work=$(mktemp -d /tmp/sroute-tl-XXXXXX)
pids=()
cleanup() {
  fusermount3 -u "$work/mnt" 2>/dev/null || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
head -c 32 /dev/urandom | base64 > "$work/secret"
chmod 600 "$work/secret"
base=$((17600 + RANDOM % 1000))
flash=${FLASH:-preset=small,channels=2,dies_per_channel=1,blocks_per_die=512,pages_per_block=64,read_us=4000,program_us=8000,buffer_pages=4}
app_args=${APP_ARGS:-alpha=3,end=1.5,window=20,min_ops=50,hold=5,cooldown=30,rate=512K,queue=32,spread=2}
# burst_driver arguments given after OUT replace these.
driver_args=(--quiet max=25,med=10,min=1 --burst max:20:20:60 --duration 200
  --compress 2 --seed 1 --workers 128)
[ $# -eq 0 ] || driver_args=("$@")

run() {  # NAME APP-ARGS...
  local name=$1
  shift
  rm -rf "$work/run" && mkdir -p "$work/run/home" "$work/mnt"
  pids=()
  "$controller" --db "$work/run/db" --listen "127.0.0.1:$base" \
    --secret-file "$work/secret" --stats-interval-ms 500 "$@" \
    > "$work/run/controller.log" 2>&1 &
  pids+=($!)
  sleep 0.5
  local eps=()
  for i in 1 2 3; do
    mkdir -p "$work/run/s$i" "$work/run/f$i"
    "$server" --root "$work/run/s$i" --name "S$i" \
      --listen "127.0.0.1:$((base + i))" --secret-file "$work/secret" \
      --controller "127.0.0.1:$base" \
      --endpoint "ssd=flash:$work/run/f$i,$flash" \
      --rule "<*, *, //S$i/*> -> <IO, //ssd/*>" \
      > "$work/run/s$i.log" 2>&1 &
    pids+=($!)
    eps+=(--endpoint "S$i=127.0.0.1:$((base + i))")
  done
  sleep 0.5
  "$fuse" "$work/mnt" --backing "$work/run/home" --secret-file "$work/secret" \
    --kernel-cache off --name vol --controller "127.0.0.1:$base" "${eps[@]}" \
    > "$work/run/fuse.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do mountpoint -q "$work/mnt" && break; sleep 0.1; done
  local c=("$ctl" --controller "127.0.0.1:$base" --secret-file "$work/secret")
  local i=1
  for flow in max med min; do
    mkdir -p "$work/run/home/vol"
    : > "$work/run/home/$flow"
    "${c[@]}" rules add --host vol "<*, *, //home/$flow> -> <IO, //S$i/vol/$flow>" >/dev/null
    dd if=/dev/zero of="$work/mnt/$flow" bs=1M count=16 status=none
    i=$((i + 1))
  done
  "$driver" --file max="$work/mnt/max" --file med="$work/mnt/med" \
    --file min="$work/mnt/min" "${driver_args[@]}" \
    --csv "$out/data/$name.csv" 2> "$work/run/driver.err" |
    sed "s/^/$name  /" | tee -a "$out/results.txt"
  start=$(awk '/schedule starts at unix/ { print $NF }' "$work/run/driver.err")
  echo "$start" > "$out/data/$name.start"
  cp "$work/run/controller.log" "$out/data/$name.controller.log"
  if [ "$name" = app ]; then
    "${c[@]}" offload status | sed "s/^/$name  /" | tee -a "$out/results.txt"
  fi
  fusermount3 -u "$work/mnt"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}

echo "# bench/tail_latency.sh ${driver_args[*]} ($(git rev-parse --short HEAD))" > "$out/results.txt"
run none
run app --app "tail_latency:$app_args"

# The reclaim: from the app's "reclaim:" decision to its "reclaimed:" one,
# as seconds of the schedule; its MB/s; each flow's p99 in that window, in
# both runs (the same seeded IOs).
log=$out/data/app.controller.log
began=$(awk '/tail_latency: reclaim: / { print $2; exit }' "$log")
ended=$(awk '/tail_latency: reclaimed: / { print $2; exit }' "$log")
if [ -n "$began" ] && [ -n "$ended" ]; then
  zero=$(cat "$out/data/app.start")
  from=$(awk -v t="$(date -d "$began" +%s.%N)" -v z="$zero" 'BEGIN { print t - z }')
  to=$(awk -v t="$(date -d "$ended" +%s.%N)" -v z="$zero" 'BEGIN { print t - z }')
  bytes=$(awk '/tail_latency: reclaiming .* bytes moved in this step/ {
      for (i = 2; i <= NF; i++) if ($i == "bytes" && $(i+1) == "moved") s += $(i-1)
    } END { print s + 0 }' "$log")
  {
    awk -v f="$from" -v t="$to" -v b="$bytes" 'BEGIN {
      printf "reclaim  from %.1f s to %.1f s of the schedule: %.1f MB in %.1f s, %.2f MB/s\n",
        f, t, b / 1e6, t - f, b / 1e6 / (t - f) }'
    # Each flow's p99 inside the reclaim's window, and outside both the
    # burst and the reclaim (the quiet norm it is compared with).
    echo "reclaim  p99 (us): run flow op, IOs and p99 in the reclaim, IOs and p99 when quiet"
    p99() {  # CSV FLOW OP IN-WINDOW(1/0)
      awk -F, -v from="$from" -v to="$to" -v fl="$2" -v o="$3" -v inside="$4" '
        NR > 1 && $1 == fl && $2 == o {
          w = $3 / 1e6 >= from && $3 / 1e6 < to
          if ((inside && w) || (!inside && !w && $5 == 0)) print $4
        }' "$1" | sort -g |
        awk '{ v[NR] = $1 } END { i = int(0.99 * NR); if (i < 1) i = 1
                                  printf "%6d %10.0f", NR, NR ? v[i] : 0 }'
    }
    for name in none app; do
      for flow in max med min; do
        for op in read write; do
          printf "reclaim  %-4s %-11s %s  %s\n" "$name" "$flow $op" \
            "$(p99 "$out/data/$name.csv" "$flow" "$op" 1)" \
            "$(p99 "$out/data/$name.csv" "$flow" "$op" 0)"
        done
      done
    done
  } | tee -a "$out/results.txt"
else
  echo "reclaim  none in this run" | tee -a "$out/results.txt"
fi

for name in none app; do
  awk -F, '$1 == "max" && $2 == "write" && $5 == 1 { print $4 }' \
    "$out/data/$name.csv" | sort -g |
    awk '{ v[NR] = $1 } END { for (i = 1; i <= NR; i++) print v[i], i / NR }' \
    > "$out/data/cdf_$name.dat"
done
gnuplot <<GP
set terminal pngcairo size 800,500 noenhanced
set output "$out/cdf_max.png"
set title "max flow, writes during the burst: latency CDF"
set xlabel "latency (us, from the scheduled time)"
set ylabel "fraction of writes (1 - 10^-y)"
set logscale x
set yrange [0:3.5]
set ytics ("0" 0, "0.9" 1, "0.99" 2, "0.999" 3)
set key bottom right
set grid
f(p) = -log10(1 - p + 1e-9)
plot "$out/data/cdf_none.dat" using 1:(f(\$2)) with lines lw 2 title "no app", \
     "$out/data/cdf_app.dat" using 1:(f(\$2)) with lines lw 2 title "tail_latency"
GP
echo "tables: $out/results.txt; plot: $out/cdf_max.png"
