#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# ReFlex's QoS scenarios (Klimovic et al., ASPLOS'17, §5.3; issue 48) on an
# emulated flash device (preset rackblox at dilation 50: 32 dies of 80 us
# reads and 800 us programs, run 50 times slower, so that this machine's
# cores are not the bottleneck), behind a qos stage on a FUSE volume.
# Tenants are users (uid 2001..2005), each a fio process of its own:
#
#   A  latency-critical, reserves RA IOPS, 100 % reads, p95 target SLO
#   B  latency-critical, reserves RB IOPS,  80 % reads, p95 target SLO
#   C  best effort, 95 % reads, as much as it can (32 in flight)
#   D  best effort, 25 % reads, as much as it can (32 in flight)
#   P  a probe: reads at queue depth 1, 20 a second (reserves 40 IOPS)
#
# The device rate R is the read-only rate within SLO of the committed
# calibration (examples/qos/flash-rackblox-d50.txt); the reservations scale
# ReFlex's (A 2.4 K and B 1.4 K IOPS of a 8.4 K tokens/s device) to it, and
# a write costs 10 reads (the device's read/program rate ratio). Runs:
#
#   1-off  scenario 1 with the tenants' IOs straight to the device
#   1-on   scenario 1 through the stage
#   2-on   scenario 2 (B offers 65 % of its reservation) through the stage
#
# Each prints per tenant: IOPS, reads and writes, p95 and p99 latency (fio's
# completion latency, queueing in the stage included), and the tokens/s it
# got (reads + 10 x writes). Results in OUT/ (default bench/results/qos_reflex).
#
#   bench/qos_reflex.sh [OUT]      (RUNTIME=20 seconds per run by default)
#   CURVE=1 RUNTIME=10 bench/qos_reflex.sh OUT   (p95 against offered load)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results/qos_reflex}
runtime=${RUNTIME:-20}
fuse=build/fuse/sroute-fuse
ctl=build/tools/sroutectl/sroutectl
for x in "$fuse" "$ctl"; do
  [ -x "$x" ] || { echo "build first: scripts/build.sh build ($x)" >&2; exit 1; }
done
command -v fio >/dev/null || { echo "fio: scripts/install-bench-deps.sh" >&2; exit 1; }
mkdir -p "$out"
work=$(mktemp -d /tmp/sroute-qr-XXXXXX)
cleanup() {
  fusermount3 -u "$work/mnt" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

slo_us=25000 # ReFlex's 500 us, dilated 50 times
curve=$(tail -1 examples/qos/flash-rackblox-d50.txt | sed 's/^stage options: //')
# R: the read-only rate within the SLO, linear between the curve's points.
rate=$(python3 - "$curve" "$slo_us" <<'PY'
import sys
pts = [tuple(map(int, c.split("=")[1].split("/")))
       for c in sys.argv[1].split(",") if c.startswith("curve=")]
slo = int(sys.argv[2])
best = pts[0][2]
for (a, _, ra), (b, _, rb) in zip(pts, pts[1:]):
    if a <= slo <= b:
        best = ra + (rb - ra) * (slo - a) / (b - a)
if slo >= pts[-1][0]:
    best = pts[-1][2]
print(int(best))
PY
)
ra=$((rate * 2400 / 8400))
rb=$((rate * 1400 / 8400))
echo "device: $rate tokens/s within ${slo_us} us; A reserves $ra, B $rb IOPS" |
  tee "$out/setup.txt"

mkdir -p "$work/home/db" "$work/ssd/db" "$work/mnt" "$work/out"
chmod 0777 "$work/home/db" "$work/ssd/db" "$work/out"
chmod 0755 "$work" "$work/home" "$work/ssd"
"$fuse" "$work/mnt" --backing "$work/home" --kernel-cache off \
  --control "$work/sock" \
  --endpoint "ssd=flash:$work/ssd,preset=rackblox,dilation=50" \
  --tenant A=uid:2001 --tenant B=uid:2002 --tenant C=uid:2003 \
  --tenant D=uid:2004 --tenant P=uid:2005 \
  --stage q=qos --rule '<stage:q, *, //home/db/*> -> <IO, //ssd/db/*>' \
  --rule '<*, *, //home/db/*> -> <IO, //ssd/db/*>'
host=(--host "unix:$work/sock")
# The data: written whole once, so that every read finds a page the device
# stores (a page never written reads at buffer speed).
dd if=/dev/urandom of="$work/mnt/db/data" bs=1M count=16 oflag=direct status=none
chmod 0666 "$work/mnt/db/data"

# DEFICIT_FLOOR: how far below zero an LC balance may go (the stage's
# default 50 tokens: five of B's writes).
tenants="write_cost=10,tokens_per_s=$rate,deficit_floor=${DEFICIT_FLOOR:-50}"
tenants+=",tenant=A/lc/$ra/100/$slo_us"
tenants+=",tenant=B/lc/$rb/80/$slo_us,tenant=P/lc/40/100/$slo_us"
tenants+=",tenant=C/be,tenant=D/be"
"$ctl" "${host[@]}" stages set q "$tenants" >/dev/null

# tenant UID RWMIXREAD DEPTH RATE(0: none) NAME RUN
tenant() {
  local uid=$1 mix=$2 depth=$3 rate=$4 name=$5 run=$6
  local args=(--name="$name" --filename="$work/mnt/db/data" --rw=randrw
    --rwmixread="$mix" --bs=4k --direct=1 --ioengine=libaio --iodepth="$depth"
    --time_based --runtime="$runtime" --norandommap --randrepeat=0
    --lat_percentiles=1 --percentile_list=50:95:99 --output-format=json
    --output="$work/out/$run-$name.json")
  if [ "$rate" -gt 0 ]; then
    # fio's rate applies to reads and writes each: split it by the mix.
    local reads=$((rate * mix / 100)) writes=$((rate - rate * mix / 100))
    [ "$reads" -gt 0 ] || reads=1
    [ "$writes" -gt 0 ] || writes=1
    args+=(--rate_iops="$reads,$writes" --rate_process=poisson)
  fi
  setpriv --reuid="$uid" --regid="$uid" --clear-groups fio "${args[@]}" >/dev/null
}

# What the latency-critical tenants offer, percent of their reservations: a
# Poisson source at its token rate exactly queues without bound (a token
# bucket's queue at utilization 1), so a reservation needs headroom over
# the mean rate it carries.
lc_load=${LC_LOAD:-90}

run() {  # NAME STAGE(on|off) B_RATE [A_RATE]
  local name=$1 stage=$2 brate=$3 arate=${4:-$((ra * lc_load / 100))} id=""
  if [ "$stage" = on ]; then
    id=$("$ctl" "${host[@]}" rules add '@10 <*, *, //home/db/*> -> <IO, stage:q>')
  fi
  tenant 2001 100 32 "$arate" A "$name" &
  local a=$!
  tenant 2002 80 32 $((brate * lc_load / 100)) B "$name" &
  local b=$!
  tenant 2003 95 32 0 C "$name" &
  local c=$!
  tenant 2004 25 32 0 D "$name" &
  local d=$!
  tenant 2005 100 1 20 P "$name" &
  local p=$!
  wait $a $b $c $d $p
  [ -z "$id" ] || "$ctl" "${host[@]}" rules rm "$id" >/dev/null
  python3 - "$work" "$name" "$slo_us" "$arate" \
    $((brate * lc_load / 100)) <<'PY' | tee "$out/$name.txt"
import json, sys
work, name, slo = sys.argv[1], sys.argv[2], int(sys.argv[3])
want = {"A": int(sys.argv[4]), "B": int(sys.argv[5]), "P": 20}
print(f"run {name}: TENANT IOPS READS WRITES P95_US (READS WRITES) P99_US "
      f"TOKENS/S SLO_MET (the IOPS offered served, and p95 <= {slo} us)")
for t in "ABCDP":
    j = json.load(open(f"{work}/out/{name}-{t}.json"))["jobs"][0]
    r, w = j["read"], j["write"]
    def pct(d, p):
        if d["total_ios"] == 0:
            return 0
        return d["lat_ns"].get("percentile", {}).get(p, 0) / 1000
    # A mix's p95 and p99: the larger of its reads' and its writes'.
    p95r, p95w = pct(r, "95.000000"), pct(w, "95.000000")
    p95 = max(p95r, p95w)
    p99 = max(pct(r, "99.000000"), pct(w, "99.000000"))
    iops = r["iops"] + w["iops"]
    tokens = r["iops"] + 10 * w["iops"]
    met = ""
    if t in want:
        # The probe's 20 IOPS are a Poisson count: its latency is the test.
        served = t == "P" or iops >= 0.9 * want[t]
        met = "yes" if served and p95 <= slo else "no"
    print(f"{t} {iops:.0f} {r['iops']:.0f} {w['iops']:.0f} {p95:.0f} "
          f"({p95r:.0f} {p95w:.0f}) {p99:.0f} {tokens:.0f} {met}")
PY
}

if [ "${CURVE:-0}" = 0 ]; then
  run 1-off off "$rb"
  run 1-on on "$rb"
  run 2-on on $((rb * 65 / 100))
  exit 0
fi

# CURVE=1: A's p95 (and the probe's) against A's offered load, 20 to 140 %
# of its reservation, scenario 1's other tenants as they are, with and
# without the stage; OUT/curve.txt and OUT/p95_vs_load.png.
echo "STAGE A_OFFERED_PERCENT A_IOPS A_P95_US P_P95_US" > "$out/curve.txt"
for stage in off on; do
  for pct in 20 40 60 80 100 120 140; do
    run "curve-$stage-$pct" "$stage" $((rb * lc_load / 100)) $((ra * pct / 100)) >/dev/null
    awk -v s=$stage -v p=$pct '$1 == "A" {a = $2 " " $5} $1 == "P" {q = $5}
      END {print s, p, a, q}' "$out/curve-$stage-$pct.txt" >> "$out/curve.txt"
  done
done
if ! command -v gnuplot >/dev/null; then
  apt-get install -y -qq gnuplot-nox >/dev/null
fi
for stage in off on; do
  awk -v s=$stage '$1 == s {print $2, $4 / 1000, $5 / 1000}' "$out/curve.txt" \
    > "$work/$stage.dat"
done
gnuplot <<PLOT
set terminal pngcairo size 800,500
set output "$out/p95_vs_load.png"
set title "Tenant A's p95 against its offered load (reservation $ra IOPS; B at ${lc_load} %, C and D flat out)"
set xlabel "A's offered load, % of its reservation"
set ylabel "p95 latency, ms"
set logscale y
set key top left
set arrow from graph 0, first $((slo_us / 1000)) to graph 1, first $((slo_us / 1000)) nohead dt 2
plot "$work/off.dat" using 1:2 with linespoints title "A, no stage", \
     "$work/on.dat" using 1:2 with linespoints title "A, qos stage", \
     "$work/off.dat" using 1:3 with linespoints dt 3 title "QD1 probe, no stage", \
     "$work/on.dat" using 1:3 with linespoints dt 3 title "QD1 probe, qos stage"
PLOT
cat "$out/curve.txt"
