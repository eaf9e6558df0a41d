#!/usr/bin/env bash
# Issue 50's scale row: sroute-sim on bench/sim/scale.textproto (1 000
# servers, 4 000 devices, 10 000 flows, 10 simulated minutes), its wall time
# and peak memory from /usr/bin/time. Keeps the report in OUT/report.txt and
# OUT/report.json.
#
#   bench/sim_scale.sh [OUT] [SCENARIO]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results/sim_scale}
scenario=${2:-bench/sim/scale.textproto}
bin=build/sim/sroute-sim
[ -x "$bin" ] || { echo "build first: scripts/build.sh build" >&2; exit 1; }
mkdir -p "$out"
/usr/bin/time -v "$bin" --devices 5 "$scenario" >"$out/report.txt" \
  2>"$out/time.txt"
cat "$out/report.txt"
grep -E "Elapsed|Maximum resident|User time" "$out/time.txt"
