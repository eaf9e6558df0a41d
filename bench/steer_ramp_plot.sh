#!/usr/bin/env bash
# Issue 49's heterogeneity ramp, drawn from a steer_policies run's log
# (its stderr): each policy's p90 (model us) as the offered load rises,
# one line per policy, the target as a line across. gnuplot (installed
# with apt-get if missing).
#
#   build/bench/steer_policies ... 2>LOG; bench/steer_ramp_plot.sh LOG OUT.png
set -euo pipefail
log=$1
png=$2
if ! command -v gnuplot >/dev/null; then
  apt-get install -y -qq gnuplot-nox >/dev/null
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# "POLICY: offered 1435/s served 1403/s p50 84 us p90 173 us; ..."
policies=$(sed -n 's/^\([a-z]*\): offered .*/\1/p' "$log" | uniq)
lines=""
for p in $policies; do
  sed -n "s|^$p: offered \([0-9]*\)/s served [0-9]*/s p50 [0-9]* us p90 \([0-9]*\) us.*|\1 \2|p" \
    "$log" | sort -n >"$dir/$p.dat"
  lines+="${lines:+, }\"$dir/$p.dat\" using 1:2 with linespoints lw 2 title \"$p\""
done
gnuplot <<GP
set terminal pngcairo size 800,450 noenhanced
set output "$png"
set title "p90 as the offered load rises (open loop, 4 KiB, heterogeneous pool)"
set xlabel "offered requests/s (wall; model = x dilation)"
set ylabel "p90 (model us)"
set logscale y
set yrange [50:20000]
set key top left
set grid
plot $lines, 1000 with lines dt 2 lc rgb "black" title "target"
GP
echo "$png"
