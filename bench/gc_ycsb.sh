#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# GC coordination under YCSB-style load (issue 24): runs build/bench/gc_ycsb
# on every mix (A, B, C, D, E, F and W: 50, 5, 0 % updates, inserts and
# latest reads, scans, read-modify-write, 95 % updates), the four set-ups
# side by side in each (a GC-oblivious, b redirect, c delayed GC, d
# background GC), keeps the tables in OUT/results.txt and draws one read
# latency CDF per mix (OUT/cdf_MIX.png, gnuplot; installed with apt-get if
# missing).
#
#   [MIXES="A F"] bench/gc_ycsb.sh [OUT] [gc_ycsb arguments...]
#   bench/gc_ycsb.sh bench/results/gc_ycsb seconds=10 threads=16 dilation=5 rate=4000
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results/gc_ycsb}
shift || true
bin=build/bench/gc_ycsb
[ -x "$bin" ] || { echo "build first: scripts/build.sh build" >&2; exit 1; }
if ! command -v gnuplot >/dev/null; then
  apt-get install -y -qq gnuplot-nox >/dev/null
fi
mkdir -p "$out/data"
mixes=${MIXES:-"A B C D E F W"}  # MIXES="A F" for some
: > "$out/results.txt"
for mix in $mixes; do
  "$bin" workload="$mix" cdf_dir="$out/data" "$@" | tee -a "$out/results.txt"
done
for mix in $mixes; do
  gnuplot <<GP
set terminal pngcairo size 800,500 noenhanced
set output "$out/cdf_$mix.png"
set title "YCSB $mix: read latency CDF, replicated vSSD pair under GC"
set xlabel "read latency (model us)"
set ylabel "fraction of reads (1 - 10^-y)"
set logscale x
set yrange [0:4]
set ytics ("0" 0, "0.9" 1, "0.99" 2, "0.999" 3, "0.9999" 4)
set key bottom right
set grid
f(p) = -log10(1 - p + 1e-12)
plot "$out/data/${mix}_a.dat" using 1:(f(\$2)) with lines lw 2 title "a GC-oblivious", \
     "$out/data/${mix}_b.dat" using 1:(f(\$2)) with lines lw 2 title "b redirect", \
     "$out/data/${mix}_c.dat" using 1:(f(\$2)) with lines lw 2 title "c + delayed GC", \
     "$out/data/${mix}_d.dat" using 1:(f(\$2)) with lines lw 2 title "d + background GC"
GP
done
echo "tables: $out/results.txt; plots: $out/cdf_*.png"
