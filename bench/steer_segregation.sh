#!/usr/bin/env bash
# Issue 49's segregation drill-down: a segregated replica set (placement
# anywhere, two copies) over eight emulated flash members (2 worn, 4
# healthy, 2 fast); the reads stay at a share of the pool's reads-only
# ideal while the writes grow. Per step: the write-mode window the plans
# chose and the share of reads that found every holder of their region in
# write mode (build/bench/steer_policies drill=segregation). Keeps the
# table in OUT/results.txt and draws OUT/segregation.png (gnuplot;
# installed with apt-get if missing).
#
#   bench/steer_segregation.sh [OUT] [steer_policies arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results/steer_segregation}
shift || true
bin=build/bench/steer_policies
[ -x "$bin" ] || { echo "build first: scripts/build.sh build" >&2; exit 1; }
if ! command -v gnuplot >/dev/null; then
  apt-get install -y -qq gnuplot-nox >/dev/null
fi
mkdir -p "$out"
"$bin" drill=segregation segregate=1 zipf=0 load=0.4 step_s=2 warmup_s=0.5 \
  presets=worn,worn,healthy,healthy,healthy,healthy,fast,fast \
  policies=sandook threshold=50 write_steps=2,5,10,20,30 "$@" \
  2>"$out/log.txt" | tee "$out/results.txt"
grep -E '^sandook +[0-9]' "$out/results.txt" | tr -d '%' >"$out/data.txt"
gnuplot <<GP
set terminal pngcairo size 800,450 noenhanced
set output "$out/segregation.png"
set title "write-mode window and reads on write-mode members as writes grow (8 members, k = 2)"
set xlabel "writes (% of requests; the reads stay the same)"
set ylabel "members in write mode (mean over epochs)"
set y2label "reads on write-mode members (%)"
set yrange [0:8.5]
set y2range [0:105]
set ytics nomirror
set y2tics
set key top left
set grid
plot "$out/data.txt" using 2:6 with linespoints lw 2 title "window", \
     "$out/data.txt" using 2:7 axes x1y2 with linespoints lw 2 title "reads on write mode"
GP
echo "table: $out/results.txt; plot: $out/segregation.png"
