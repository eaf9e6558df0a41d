#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Two of SNIS's studies (the storage-network iterative simulation paper,
# /work/shared/papers; issue 50's "studies committed in bench/ with their
# plots") as sroute-sim scenarios, run one at a time, their tables and plots:
#
#  1. Read/write interference (SNIS §II, Fig. 2-a: as the inter-arrival time
#     shrinks, reads slow down far more than writes).
#     bench/sim/studies/rw_interference.textproto.in, one scenario per step
#     of RW_RATES (IOs a second per host, which is also per device: 8 hosts
#     over 8 healthy devices): 4 KiB IOs, half reads, on a 10 Gb/s rack,
#     beside the same reads alone and the same writes alone on devices of
#     their own (SNIS's "standalone" runs). Every step issues RW_IOS IOs a
#     host (its duration is RW_IOS / rate), so light steps reach the
#     devices' steady state of garbage collection too. Slowdown is a
#     latency over the same latency at the lightest step, and (SNIS's own
#     definition) over the standalone run's at the same step.
#     -> OUT/rw_interference.{txt,tsv,png}
#  2. Write incast (SNIS §IV-B): N hosts (INCAST_HOSTS) write 64 KiB blocks
#     at 280 IOs a second each to one server of 16 fast devices on a 10 Gb/s
#     rack (bench/sim/studies/incast.textproto.in); then the largest N again
#     on 100 Gb/s links, to tell the network's share from the devices'.
#     -> OUT/incast.{txt,tsv,png}
#     Keep the offered load at or under the link's: open-loop writes over
#     it pile up flows in flight, and SimGrid's cost grows with them (64
#     hosts at twice the link ran over 10 minutes without finishing).
#
# The reports (sroute-sim --json) are kept in OUT/raw/. Each table's header
# says the commit, the binary and how long the study ran. The binary is
# copied first, so that a rebuild during the run does not mix two of them.
# About 20 s for the first study and 5 s for the second on one core.
#
#   bench/sim_studies.sh [OUT]        (OUT: bench/results/sim/studies)
#   STUDIES=incast bench/sim_studies.sh       (one of them)
#   RW_RATES="125 1000 ..." RW_IOS=20000 INCAST_HOSTS="1 2 4 ..." ...
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results/sim/studies}
studies=${STUDIES:-rw_interference incast}
rw_rates=${RW_RATES:-125 1000 4000 10000 16000 20000 22000 24000}
rw_ios=${RW_IOS:-20000}
incast_hosts=${INCAST_HOSTS:-1 2 4 8 16 32 64}
bin=build/sim/sroute-sim
tmpl=bench/sim/studies
[ -x "$bin" ] || { echo "build first: scripts/build.sh build ($bin)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "needs python3" >&2; exit 1; }
if ! command -v gnuplot >/dev/null; then
  apt-get install -y -qq gnuplot-nox >/dev/null
fi
mkdir -p "$out/raw"
work=$(mktemp -d /tmp/sroute-sim-studies-XXXXXX)
trap 'rm -rf "$work"' EXIT
cp "$bin" "$work/sroute-sim"
sim=$work/sroute-sim

# What the tables were made with.
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
# Uncommitted changes the binary may hold: those older than it.
dirty=0
while read -r f; do
  if [ -e "$f" ] && [ "$f" -ot "$bin" ]; then dirty=$((dirty + 1)); fi
done < <(git status --porcelain -- sim proto stages 2>/dev/null | cut -c4-)
if [ "$dirty" -gt 0 ]; then
  commit="$commit (+ $dirty uncommitted files in sim/ proto/ stages/ older than the binary)"
fi
binary="$(sha256sum "$bin" | cut -c1-12), built $(date -r "$bin" '+%F %T')"

# fill TEMPLATE OUTFILE KEY=VALUE...: every @KEY@ replaced; none may be left.
fill() {
  local in=$1 to=$2 args=() kv
  shift 2
  for kv in "$@"; do args+=(-e "s/@${kv%%=*}@/${kv#*=}/g"); done
  sed "${args[@]}" "$in" >"$to"
  if grep -n '@[A-Z_]*@' "$to" >&2; then
    echo "$to: placeholders left" >&2
    exit 1
  fi
}

# run SCENARIO JSON: one sroute-sim at a time; its wall time on stdout.
run() {
  local t0 t1
  t0=$(date +%s.%N)
  "$sim" --json "$1" >"$2"
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }'
}

rw_interference() {
  local start r d half secs list=()
  start=$(date +%s.%N)
  for r in $rw_rates; do
    d=$(awk -v n="$rw_ios" -v r="$r" 'BEGIN { printf "%.6g", n / r }')
    half=$(awk -v r="$r" 'BEGIN { printf "%.6g", r / 2 }')
    fill "$tmpl/rw_interference.textproto.in" "$work/rw_$r.textproto" \
      DURATION_S="$d" MIXED_IOPS="$r" READ_IOPS="$half" WRITE_IOPS="$half"
    secs=$(run "$work/rw_$r.textproto" "$out/raw/rw_interference_$r.json")
    echo "rw_interference: $r IOs/s a host, ${d} s simulated: ${secs} s" >&2
    list+=("$r:$secs")
  done
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  python3 - "$out" "$rw_ios" "$commit" "$binary" "$secs" "${list[@]}" <<'PY'
import json, sys
out, ios, commit, binary, total = sys.argv[1:6]
steps = [a.split(':') for a in sys.argv[6:]]
rows = []
for rate, wall in steps:
    d = json.load(open(f'{out}/raw/rw_interference_{rate}.json'))
    fl = {f['name']: f for f in d['flows']}
    g = lambda name, k: float(fl[name].get(k, 0))
    rows.append(dict(
        rate=float(rate), iat=1e6 / float(rate), wall=float(wall),
        passes=len(d['iterations']), converged=bool(d.get('converged', False)),
        stopped=d.get('stopped', ''),
        iops=g('mixed', 'iops'), share=g('mixed', 'network_share'),
        rp50=g('mixed', 'read_p50_us'), rp99=g('mixed', 'read_p99_us'),
        wp50=g('mixed', 'write_p50_us'), wp99=g('mixed', 'write_p99_us'),
        arp50=g('reads_alone', 'read_p50_us'),
        arp99=g('reads_alone', 'read_p99_us'),
        awp50=g('writes_alone', 'write_p50_us'),
        awp99=g('writes_alone', 'write_p99_us')))
rows.sort(key=lambda r: r['rate'])
base = rows[0]
for r in rows:
    for k in ('rp50', 'rp99', 'wp50', 'wp99'):
        r['sd_' + k] = r[k] / base[k]
        r['sa_' + k] = r[k] / r['a' + k]
cols = ['iat_us', 'host_iops', 'passes', 'converged', 'mixed_iops',
        'network_share', 'read_p50_us', 'read_p99_us', 'write_p50_us',
        'write_p99_us', 'alone_read_p50_us', 'alone_read_p99_us',
        'alone_write_p50_us', 'alone_write_p99_us',
        'sd_read_p50', 'sd_read_p99', 'sd_write_p50', 'sd_write_p99',
        'snis_read_p50', 'snis_read_p99', 'snis_write_p50', 'snis_write_p99',
        'wall_s', 'stopped']
with open(f'{out}/rw_interference.tsv', 'w') as f:
    f.write('\t'.join(cols) + '\n')
    for r in rows:
        v = [r['iat'], r['rate'], r['passes'], int(r['converged']), r['iops'],
             r['share'], r['rp50'], r['rp99'], r['wp50'], r['wp99'],
             r['arp50'], r['arp99'], r['awp50'], r['awp99'],
             r['sd_rp50'], r['sd_rp99'], r['sd_wp50'], r['sd_wp99'],
             r['sa_rp50'], r['sa_rp99'], r['sa_wp50'], r['sa_wp99'],
             r['wall'], r['stopped']]
        f.write('\t'.join(x if isinstance(x, str) else '%.6g' % x
                          for x in v) + '\n')
L = []
L.append('Read/write interference (SNIS Fig. 2-a), bench/sim_studies.sh')
L.append(f'commit {commit}; sroute-sim {binary}')
L.append('bench/sim/studies/rw_interference.textproto.in: 8 hosts -> 4 servers'
         ' x 2 healthy devices, 10 Gb/s rack, 4 KiB, 50 % reads;')
L.append(f'{ios} IOs a host per step; inter-arrival = 1e6 / rate, per host'
         ' and per device (8 hosts over 8 devices).')
L.append(f'study wall time {total} s (one sroute-sim at a time)')
L.append('')
L.append('Latencies (us), mixed flow and the standalone reads / writes:')
h = ('%9s %8s %6s %6s %8s %9s %9s %9s %9s  %9s %9s %9s %9s' %
     ('IAT_US', 'IOPS/HOST', 'PASSES', 'NET', 'READ_P50', 'READ_P99',
      'WRITE_P50', 'WRITE_P99', '', 'ALONE_R50', 'ALONE_R99', 'ALONE_W50',
      'ALONE_W99'))
L.append(h)
for r in rows:
    L.append('%9.1f %9.0f %6d %6.2f %8.1f %9.1f %9.1f %9.1f %9s  %9.1f %9.1f'
             ' %9.1f %9.1f' %
             (r['iat'], r['rate'], r['passes'], r['share'], r['rp50'],
              r['rp99'], r['wp50'], r['wp99'], '', r['arp50'], r['arp99'],
              r['awp50'], r['awp99']))
L.append('')
L.append('Slowdown of the mixed flow: over the lightest step | over the'
         ' standalone run at the same step (SNIS):')
L.append('%9s %8s %8s %8s %8s  | %8s %8s %8s %8s' %
         ('IAT_US', 'READ_P50', 'READ_P99', 'WRITE_P50', 'WRITE_P99',
          'READ_P50', 'READ_P99', 'WRITE_P50', 'WRITE_P99'))
for r in rows:
    L.append('%9.1f %8.2f %8.2f %9.2f %9.2f  | %8.2f %8.2f %9.2f %9.2f' %
             (r['iat'], r['sd_rp50'], r['sd_rp99'], r['sd_wp50'],
              r['sd_wp99'], r['sa_rp50'], r['sa_rp99'], r['sa_wp50'],
              r['sa_wp99']))
L.append('')
L.append('Per step: converged, why the iteration stopped, wall time:')
for r in rows:
    L.append('%9.1f  %-5s %s  (%.2f s)' %
             (r['iat'], 'yes' if r['converged'] else 'NO', r['stopped'],
              r['wall']))
open(f'{out}/rw_interference.txt', 'w').write('\n'.join(L) + '\n')
print('\n'.join(L))
PY
  gnuplot <<GP
set terminal pngcairo size 1300,520 noenhanced
set output '$out/rw_interference.png'
set datafile separator tab
set key top left
set logscale x
set logscale y
set xrange [*:*] reverse
set grid
set xlabel 'mean inter-arrival time per host = per device (us), load grows ->'
set ylabel 'slowdown'
set multiplot layout 1,2 title 'sroute-sim: read/write interference, 4 KiB, 50 % reads, healthy flash, 10 Gb/s rack'
set title 'latency / latency at the lightest step'
plot '$out/rw_interference.tsv' skip 1 using 1:15 with linespoints lw 2 pt 7 title 'read p50', \
     '' skip 1 using 1:16 with linespoints lw 2 pt 5 title 'read p99', \
     '' skip 1 using 1:17 with linespoints lw 2 pt 6 dt 2 title 'write p50', \
     '' skip 1 using 1:18 with linespoints lw 2 pt 4 dt 2 title 'write p99'
set title 'latency / standalone latency at the same step (SNIS)'
plot '$out/rw_interference.tsv' skip 1 using 1:19 with linespoints lw 2 pt 7 title 'read p50', \
     '' skip 1 using 1:20 with linespoints lw 2 pt 5 title 'read p99', \
     '' skip 1 using 1:21 with linespoints lw 2 pt 6 dt 2 title 'write p50', \
     '' skip 1 using 1:22 with linespoints lw 2 pt 4 dt 2 title 'write p99'
unset multiplot
GP
  echo "rw_interference: $out/rw_interference.txt $out/rw_interference.png" >&2
}

incast() {
  local start n g secs list=() largest=0
  start=$(date +%s.%N)
  for n in $incast_hosts; do
    fill "$tmpl/incast.textproto.in" "$work/incast_$n.textproto" \
      HOSTS="$n" LINK_GBPS=10
    secs=$(run "$work/incast_$n.textproto" "$out/raw/incast_${n}_10g.json")
    echo "incast: $n hosts, 10 Gb/s: ${secs} s" >&2
    list+=("$n:10:$secs")
    if [ "$n" -gt "$largest" ]; then largest=$n; fi
  done
  g=100
  fill "$tmpl/incast.textproto.in" "$work/incast_${largest}_fast.textproto" \
    HOSTS="$largest" LINK_GBPS=$g
  secs=$(run "$work/incast_${largest}_fast.textproto" \
    "$out/raw/incast_${largest}_${g}g.json")
  echo "incast: $largest hosts, $g Gb/s: ${secs} s" >&2
  list+=("$largest:$g:$secs")
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  python3 - "$out" "$commit" "$binary" "$secs" "${list[@]}" <<'PY'
import json, sys
out, commit, binary, total = sys.argv[1:5]
RATE, BYTES, DUR = 280, 65536, 2.0  # as in incast.textproto.in
rows = []
for a in sys.argv[5:]:
    n, gbps, wall = a.split(':')
    d = json.load(open(f'{out}/raw/incast_{n}_{gbps}g.json'))
    f = d['flows'][0]
    g = lambda k: float(f.get(k, 0))
    step = float(d.get('interval_s', 0))
    ivs = f.get('intervals', [])
    # IOs that ended within the run's duration, a second: what the target
    # took (the report's iops is what the hosts issued).
    done = sum(float(i.get('iops', 0)) * step for i in ivs
               if float(i.get('from_s', 0)) + step <= DUR + 1e-9)
    last = max((float(i.get('from_s', 0)) + step for i in ivs
                if float(i.get('iops', 0)) > 0), default=0)
    rows.append(dict(
        n=int(n), gbps=float(gbps), wall=float(wall),
        passes=len(d['iterations']), converged=bool(d.get('converged', False)),
        stopped=d.get('stopped', ''), writes=int(f.get('writes', 0)),
        offered_gbps=int(n) * RATE * BYTES * 8 / 1e9,
        issued=g('iops'), achieved=done / DUR, last=last,
        p50=g('write_p50_us'), p99=g('write_p99_us'),
        share=g('network_share')))
cols = ['hosts', 'link_gbps', 'offered_gbps', 'link_load', 'issued_iops',
        'achieved_iops', 'achieved_gbps', 'write_p50_us', 'write_p99_us',
        'network_share', 'passes', 'converged', 'last_end_s', 'wall_s',
        'stopped']
with open(f'{out}/incast.tsv', 'w') as fo:
    fo.write('\t'.join(cols) + '\n')
    for r in rows:
        v = [r['n'], r['gbps'], r['offered_gbps'],
             r['offered_gbps'] / r['gbps'], r['issued'], r['achieved'],
             r['achieved'] * BYTES * 8 / 1e9, r['p50'], r['p99'], r['share'],
             r['passes'], int(r['converged']), r['last'], r['wall'],
             r['stopped']]
        fo.write('\t'.join(x if isinstance(x, str) else '%.6g' % x
                           for x in v) + '\n')
L = []
L.append('Write incast (SNIS IV-B), bench/sim_studies.sh')
L.append(f'commit {commit}; sroute-sim {binary}')
L.append('bench/sim/studies/incast.textproto.in: N hosts write 64 KiB at'
         f' {RATE} IOs/s each (Poisson) to T0 (16 fast devices), {DUR:g} s;')
L.append('ISSUED = the report\'s iops (IOs issued / duration); ACHIEVED = IOs'
         ' that ended within the duration, a second.')
L.append(f'study wall time {total} s (one sroute-sim at a time)')
L.append('')
L.append('%5s %5s %8s %5s %8s %8s %8s %10s %11s %5s %6s %8s %7s' %
         ('HOSTS', 'GB/S', 'OFFERED', 'LOAD', 'ISSUED', 'ACHIEVED',
          'ACH_GB/S', 'WRITE_P50', 'WRITE_P99', 'NET', 'PASSES', 'LAST_END',
          'WALL_S'))
for r in rows:
    L.append('%5d %5.0f %8.2f %5.2f %8.0f %8.0f %8.2f %10.1f %11.1f %5.2f'
             ' %6d %8.2f %7.2f' %
             (r['n'], r['gbps'], r['offered_gbps'],
              r['offered_gbps'] / r['gbps'], r['issued'], r['achieved'],
              r['achieved'] * BYTES * 8 / 1e9, r['p50'], r['p99'],
              r['share'], r['passes'], r['last'], r['wall']))
L.append('')
L.append('Per run: converged, why the iteration stopped:')
for r in rows:
    L.append('%5d hosts %5.0f Gb/s  %-5s %s' %
             (r['n'], r['gbps'], 'yes' if r['converged'] else 'NO',
              r['stopped']))
open(f'{out}/incast.txt', 'w').write('\n'.join(L) + '\n')
print('\n'.join(L))
PY
  gnuplot <<GP
set terminal pngcairo size 900,540 noenhanced
set output '$out/incast.png'
set datafile separator tab
set title 'sroute-sim: write incast, 64 KiB at 280 IOs/s a host onto one server (16 fast devices)'
set key top left
set logscale x 2
set logscale y
set grid
set xlabel 'hosts writing to the target'
set ylabel 'write latency (us)'
set y2label 'network share of the mean latency'
set y2range [0:1.05]
set y2tics 0.2
set ytics nomirror
set xrange [0.8:80]
plot '$out/incast.tsv' skip 1 using 1:(\$2 == 10 ? \$9 : 1/0) with linespoints lw 2 pt 5 title 'p99, 10 Gb/s', \
     '' skip 1 using 1:(\$2 == 10 ? \$8 : 1/0) with linespoints lw 2 pt 7 title 'p50, 10 Gb/s', \
     '' skip 1 using 1:(\$2 == 10 ? \$10 : 1/0) axes x1y2 with linespoints lw 2 dt 2 pt 6 title 'network share, 10 Gb/s', \
     '' skip 1 using 1:(\$2 != 10 ? \$9 : 1/0) with points pt 9 ps 2 title 'p99, 100 Gb/s', \
     '' skip 1 using 1:(\$2 != 10 ? \$10 : 1/0) axes x1y2 with points pt 8 ps 2 title 'network share, 100 Gb/s'
GP
  echo "incast: $out/incast.txt $out/incast.png" >&2
}

for s in $studies; do
  case $s in
    rw_interference) rw_interference ;;
    incast) incast ;;
    *) echo "no study named $s (rw_interference, incast)" >&2; exit 1 ;;
  esac
done
