#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# sroute-sim decides as the real system does (issue 50): the scenario
# tests/data/sim_vs_real.textproto runs for real (four sroute-server
# processes on emulated flash, a FUSE volume, sroute-controller running
# tail_latency, bench/burst_driver issuing the flows: max bursts 20x from
# 4 s for 8 s) and in sroute-sim. The app's decisions must be the same in
# both: the same kinds in the same order (off-load, reclaim, reclaimed),
# for the same flow, to the same servers (S1 and S2, not the busy S3), and
# each in the same phase of the schedule (the off-load during the burst,
# the reclaim after it). The times are printed side by side, not compared
# finely: on a loaded machine the real controller's clock is not exact.
#
# usage: sim_vs_real_test.sh SOURCE_DIR SERVER CONTROLLER FUSE SROUTECTL
#                            BURST_DRIVER SROUTE_SIM
set -euo pipefail
src=$1 server=$2 controller=$3 fuse=$4 ctl=$5 driver=$6 sim=$7
scenario=$src/tests/data/sim_vs_real.textproto
work=$(mktemp -d /tmp/sroute-simreal-XXXXXX)
pids=()
cleanup() {
  fusermount3 -u "$work/mnt" 2>/dev/null || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  echo "== controller log (tail_latency)"
  grep tail_latency "$work/controller.log" || true
  exit 1
}

# The scenario's words, so the real run is the simulated one.
preset=$(sed -n 's/^ *preset: "\(.*\)"$/\1/p' "$scenario")
app=$(sed -n 's/^apps: "\(.*\)"$/\1/p' "$scenario")
[ -n "$preset" ] && [ -n "$app" ] || fail "the scenario has no preset or app"

head -c 32 /dev/urandom | base64 > "$work/secret"
chmod 600 "$work/secret"
base=$((18600 + RANDOM % 1000))
mkdir -p "$work/home/vol" "$work/mnt"
"$controller" --db "$work/db" --listen "127.0.0.1:$base" \
  --secret-file "$work/secret" --stats-interval-ms 500 --app "$app" \
  > "$work/controller.log" 2>&1 &
pids+=($!)
eps=()
for i in 0 1 2 3; do
  mkdir -p "$work/s$i" "$work/f$i"
  "$server" --root "$work/s$i" --name "S$i" \
    --listen "127.0.0.1:$((base + 1 + i))" --secret-file "$work/secret" \
    --controller "127.0.0.1:$base" \
    --endpoint "ssd=flash:$work/f$i,$preset" \
    --rule "<*, *, //S$i/*> -> <IO, //ssd/*>" > "$work/s$i.log" 2>&1 &
  pids+=($!)
  eps+=(--endpoint "S$i=127.0.0.1:$((base + 1 + i))")
done
"$fuse" "$work/mnt" --backing "$work/home" --secret-file "$work/secret" \
  --kernel-cache off --name vol0 --controller "127.0.0.1:$base" "${eps[@]}" \
  > "$work/fuse.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do mountpoint -q "$work/mnt" && break; sleep 0.1; done
mountpoint -q "$work/mnt" || fail "the volume did not mount"
c=("$ctl" --controller "127.0.0.1:$base" --secret-file "$work/secret")
# The scenario's rules, each flow's file made through them (4 MiB).
sed -n 's/^rules: "\(.*\)"$/\1/p' "$scenario" | while read -r rule; do
  file=$(echo "$rule" | sed 's|.*//home/\([a-z]*\)>.*|\1|')
  : > "$work/home/$file"
  for _ in $(seq 50); do
    "${c[@]}" rules add --host vol0 "$rule" >/dev/null 2>&1 && break
    sleep 0.2  # until the volume has registered
  done
  truncate -s 4M "$work/mnt/$file"
done
[ "$("${c[@]}" rules ls --host vol0 | grep -c '//home/')" = 4 ] ||
  fail "the scenario's rules are not all installed"

"$driver" --file max="$work/mnt/max" --file med="$work/mnt/med" \
  --file min="$work/mnt/min" --file busy="$work/mnt/busy" \
  --quiet max=25,med=10,min=1,busy=120 --burst max:20:4:8 --duration 20 \
  --compress 1 --seed 1 --workers 128 --write-share 0.6 \
  > "$work/driver.out" 2> "$work/driver.err"
# The reclaim may still be under way when the schedule ends.
for _ in $(seq 100); do
  grep -q 'tail_latency: reclaimed:' "$work/controller.log" && break
  sleep 0.2
done
zero=$(awk '/schedule starts at unix/ { print $NF }' "$work/driver.err")

# Each decision as "KIND SECONDS-OF-THE-SCHEDULE FLOW-FILE TARGETS".
real_decisions() {
  grep -E 'tail_latency: (off-load|reclaim|reclaimed):' "$work/controller.log" |
    while read -r _ when rest; do
      t=$(date -d "${when%Z}" +%s.%N)
      kind=$(echo "$rest" | sed -E 's/^.*tail_latency: ([a-z-]+):.*/\1/')
      file=$(echo "$rest" | grep -oE '//home/[a-z]+' | head -1)
      targets=$(echo "$rest" | grep -oE '//S[0-9]/\.sroute-tl' |
        sed -E 's|//(S[0-9]).*|\1|' | sort -u | paste -sd+)
      [ "$kind" = off-load ] || targets=
      awk -v k="$kind" -v t="$t" -v z="$zero" -v f="$file" -v g="$targets" \
        'BEGIN { printf "%s %.1f %s %s\n", k, t - z, f, g }'
    done
}
sim_decisions() {
  "$sim" --json "$scenario" | python3 -c '
import json, re, sys
r = json.load(sys.stdin)
for d in r.get("decisions", []):
    ins = " ".join(d.get("insert", []))
    if d.get("reclaimed"):
        kind, targets = "reclaimed", ""
    elif "track_writes(home)" in ins:
        kind, targets = "reclaim", ""
    elif ins:
        kind = "off-load"
        targets = "+".join(sorted(set(re.findall(r"//(S\d)/\.sroute-tl", ins))))
    else:
        continue
    text = ins or d["reclaimed"]
    f = re.search(r"//home/[a-z]+", text).group(0)
    print(kind, "%.1f" % d.get("at_s", 0), f, targets)
'
}
real_decisions > "$work/real.txt"
sim_decisions > "$work/sim.txt"
echo "== decisions: KIND AT_S FILE TARGETS (real | sim)"
paste -d'|' "$work/real.txt" "$work/sim.txt" | column -t -s'|'

[ -s "$work/sim.txt" ] || fail "the simulation decided nothing"
# Real reclaims name their targets through the folders; compare the rest.
shape() { awk '{ print $1, $3, $4 }' "$1"; }
[ "$(shape "$work/real.txt")" = "$(shape "$work/sim.txt")" ] ||
  fail "the decisions differ (kind, file, targets)"
[ "$(awk '{ print $1 }' "$work/sim.txt" | paste -sd' ')" = \
  "off-load reclaim reclaimed" ] || fail "not an off-load, reclaim, reclaimed"
# Each in its phase: the off-load inside the burst (4 to 12 s), the reclaim
# after it, in both runs.
for f in real sim; do
  awk '$1 == "off-load" && ($2 < 4 || $2 >= 12) { exit 1 }
       $1 == "reclaim" && $2 < 12 { exit 1 }' "$work/$f.txt" ||
    fail "the $f run decided out of phase"
done
echo "== the same decisions in both"
