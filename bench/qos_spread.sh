#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One tenant's reservation over two servers (issue 48, beyond ReFlex): the
# slo_admission app splits T's 2 000 IOPS between S1 and S2 by where T's
# load goes (dmClock's idea), against the same app holding the split where
# it began (move=1: a share never moves, so it stays 1 000 / 1 000).
#
# Each server keeps its files in a directory behind a qos stage that makes
# 3 000 tokens/s (tokens_per_s: the rate is the stage's, not the disk's); a
# best-effort tenant H keeps 32 reads in flight on each server all along (it
# is stopped after the last phase), so T gets no more than its reservation
# on either. T (uid 2101) reads at
# 2 000 IOPS (Poisson) in three phases of PHASE seconds: 50/50 between its
# files on S1 and S2, then 90/10, then 10/90; each phase is measured after
# its first third (the app moves within a few statistics intervals).
#
#   bench/qos_spread.sh [OUT]   (PHASE=15 seconds by default)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results/qos_spread}
phase=${PHASE:-15}
bin=build
server=$bin/server/sroute-server
controller=$bin/controller/sroute-controller
fuse=$bin/fuse/sroute-fuse
ctl=$bin/tools/sroutectl/sroutectl
for x in "$server" "$controller" "$fuse" "$ctl"; do
  [ -x "$x" ] || { echo "build first: scripts/build.sh build ($x)" >&2; exit 1; }
done
command -v fio >/dev/null || { echo "fio: scripts/install-bench-deps.sh" >&2; exit 1; }
mkdir -p "$out"
work=$(mktemp -d /tmp/sroute-qs-XXXXXX)
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
chmod 0755 "$work"
base=$((18600 + RANDOM % 1000))
ctlc=("$ctl" --controller "127.0.0.1:$base" --secret-file "$work/secret")

run() {  # NAME APP-ARGS
  local name=$1 app=$2
  rm -rf "$work/run" && mkdir -p "$work/run/home/a" "$work/run/home/b" \
    "$work/mnt" "$work/run/out"
  chmod -R 0777 "$work/run/out"
  chmod 0755 "$work/run" "$work/run/home"
  pids=()
  "$controller" --db "$work/run/db" --listen "127.0.0.1:$base" \
    --secret-file "$work/secret" --stats-interval-ms 500 --app "$app" \
    > "$work/run/controller.log" 2>&1 &
  pids+=($!)
  local eps=()
  for i in 1 2; do
    mkdir -p "$work/run/s$i/d"
    "$server" --root "$work/run/s$i" --name "S$i" \
      --listen "127.0.0.1:$((base + i))" --secret-file "$work/secret" \
      --controller "127.0.0.1:$base" \
      --stage 'q=qos:write_cost=10,tokens_per_s=3000' \
      --rule "<*, *, //S$i/d/*> -> <IO, stage:q>" \
      > "$work/run/s$i.log" 2>&1 &
    pids+=($!)
    eps+=(--endpoint "S$i=127.0.0.1:$((base + i))")
  done
  "$fuse" "$work/mnt" --backing "$work/run/home" --secret-file "$work/secret" \
    --controller "127.0.0.1:$base" --kernel-cache off "${eps[@]}" \
    --tenant T=uid:2101 --tenant H=uid:2102 \
    --rule '<*, *, //home/a/*> -> <IO, //S1/d/*>' \
    --rule '<*, *, //home/b/*> -> <IO, //S2/d/*>'
  for f in a b; do
    dd if=/dev/urandom of="$work/mnt/$f/data" bs=1M count=16 oflag=direct status=none
    chmod 0644 "$work/mnt/$f/data"
  done
  until "${ctlc[@]}" qos register T --iops 2000 --p95-us 50000 --stage q \
      --on S1 --on S2 > /dev/null 2>&1; do sleep 0.2; done
  # H: best effort, 32 reads in flight on each server, all along.
  # (Longer than the phases: it is stopped after them.)
  local total=$((3 * phase + 60)) hp=()
  for f in a b; do
    setpriv --reuid=2102 --regid=2102 --clear-groups fio --name="H$f" \
      --filename="$work/mnt/$f/data" --rw=randread --bs=4k --direct=1 \
      --ioengine=libaio --iodepth=32 --time_based --runtime="$total" \
      --norandommap --output-format=json --output="$work/run/out/H$f.json" \
      > /dev/null &
    hp+=($!)
  done
  sleep 1
  echo "run $name: PHASE T_ON_S1 T_ON_S2 T_TOTAL_IOPS T_P95_US S1_SHARE S2_SHARE" |
    tee "$out/$name.txt"
  local n=0
  for split in 50 90 10; do
    n=$((n + 1))
    local r1=$((2000 * split / 100)) r2=$((2000 - 2000 * split / 100)) tp=()
    for f in a b; do
      local r=$r1
      [ $f = b ] && r=$r2
      setpriv --reuid=2101 --regid=2101 --clear-groups fio --name="T$f" \
        --filename="$work/mnt/$f/data" --rw=randread --bs=4k --direct=1 \
        --ioengine=libaio --iodepth=32 --time_based --runtime="$phase" \
        --ramp_time=$((phase / 3)) --rate_iops="$r" --rate_process=poisson \
        --norandommap --lat_percentiles=1 --percentile_list=95 \
        --output-format=json --output="$work/run/out/T$f-$n.json" > /dev/null &
      tp+=($!)
    done
    wait "${tp[@]}"
    local shares
    shares=$("${ctlc[@]}" --host S1 stages ls | grep -o 'tenant=T/lc/[0-9]*' | cut -d/ -f3)
    shares+=" $("${ctlc[@]}" --host S2 stages ls | grep -o 'tenant=T/lc/[0-9]*' | cut -d/ -f3)"
    python3 - "$work/run/out" "$n" "$split/$((100 - split))" $shares <<'PY' | tee -a "$out/$name.txt"
import json, sys
d, n, split, s1, s2 = sys.argv[1:6]
r = [json.load(open(f"{d}/T{f}-{n}.json"))["jobs"][0]["read"] for f in "ab"]
p95 = max(x["lat_ns"]["percentile"]["95.000000"] for x in r) / 1000
print(f"{split} {r[0]['iops']:.0f} {r[1]['iops']:.0f} "
      f"{r[0]['iops'] + r[1]['iops']:.0f} {p95:.0f} {s1} {s2}")
PY
  done
  kill "${hp[@]}" 2>/dev/null || true
  wait "${hp[@]}" 2>/dev/null || true
  fusermount3 -u "$work/mnt"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}

run dynamic slo_admission
run static slo_admission:move=1
