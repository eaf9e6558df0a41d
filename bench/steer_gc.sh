#!/usr/bin/env bash
# Issue 49's GC drill-down: a replica set over the emulated heterogeneous
# pool under a constant load; one member (the fast one; gc_member=N another)
# collects for two seconds. Each policy's p90 and that member's share of the
# reads over time, side by side (build/bench/steer_policies drill=gc). Keeps
# the tables in OUT/results.txt (shares) and OUT/p90.txt (p90 before, during
# and after) and draws OUT/gc_p90.png and OUT/gc_share.png (gnuplot;
# installed with apt-get if missing).
#
#   bench/steer_gc.sh [OUT] [steer_policies arguments...]
#   bench/steer_gc.sh bench/results/steer_gc load=0.5 policies=fds,reflex,gimbal,sandook
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results/steer_gc}
shift || true
bin=build/bench/steer_policies
[ -x "$bin" ] || { echo "build first: scripts/build.sh build" >&2; exit 1; }
if ! command -v gnuplot >/dev/null; then
  apt-get install -y -qq gnuplot-nox >/dev/null
fi
mkdir -p "$out/data"
policies=fds,reflex,gimbal,sandook
gc_at=2.5 gc_s=2  # steer_policies' defaults
for a in "$@"; do
  case "$a" in
    policies=*) policies=${a#policies=} ;;
    gc_at_s=*) gc_at=${a#gc_at_s=} ;;
    gc_s=*) gc_s=${a#gc_s=} ;;
  esac
done
gc_end=$(awk -v a="$gc_at" -v s="$gc_s" 'BEGIN { print a + s }')
"$bin" drill=gc zipf=0 drill_out="$out/data" policies="$policies" "$@" \
  2>"$out/log.txt" | tee "$out/results.txt"
plots() {  # column, file, title, ylabel, logscale
  local col=$1 file=$2 title=$3 ylabel=$4 log=$5 lines=""
  for p in ${policies//,/ }; do
    lines+="${lines:+, }\"$out/data/gc-$p.dat\" using 1:$col with lines lw 2 title \"$p\""
  done
  gnuplot <<GP
set terminal pngcairo size 800,450 noenhanced
set output "$out/$file"
set title "$title"
set xlabel "time (s); the member collects from $gc_at to $gc_end s"
set ylabel "$ylabel"
$log
set object 1 rect from $gc_at, graph 0 to $gc_end, graph 1 fc rgb "#dddddd" behind
set key top right
set grid
plot $lines
GP
}
plots 2 gc_p90.png "p90 per 100 ms (model us) while one member collects" \
  "p90 (model us)" "set logscale y"
plots 3 gc_share.png "the collecting member's share of the reads" \
  "share of reads" ""
# Each policy's p90 per 100 ms bin averaged before the GC (from 0.5 s),
# during it (mean and worst bin) and after (from half a second after it, for
# 3 s).
for p in ${policies//,/ }; do
  awk -v p="$p" -v g0="$gc_at" -v g1="$gc_end" '!/^#/ { t = $1; v = $2
      if (t >= 0.5 && t < g0) { b += v; nb++ }
      else if (t >= g0 && t < g1) { d += v; nd++; if (v > m) m = v }
      else if (t >= g1 + 0.5 && t < g1 + 3.5) { a += v; na++ } }
    END { printf "%-8s p90 before %6.0f us, during GC mean %6.0f max %6.0f us, after %6.0f us\n",
          p, b / nb, d / nd, m, a / na }' "$out/data/gc-$p.dat"
done | tee "$out/p90.txt"
echo "table: $out/results.txt, $out/p90.txt; plots: $out/gc_p90.png $out/gc_share.png"
