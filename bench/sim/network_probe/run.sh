#!/usr/bin/env bash
# Why sroute-sim's network is SimGrid (flow level) and not ns-3 (packet
# level): the same workload on both (a star of 64 hosts on 10 Gb/s links,
# an isolated 1 MiB transfer, a 63-to-1 incast, then Poisson transfers of
# 4 KiB to 1 MiB between random hosts), N transfers, wall time each.
# ns-3's headers come from Debian's libns3-dev, unpacked here (its .pc files
# do not work from there; the project does not install it).
#
#   bench/sim/network_probe/run.sh [OUT] [N...]
set -euo pipefail
cd "$(dirname "$0")"
out=$(realpath -m "${1:-../../results/sim/network_probe}")
shift || true
ns=("$@")
[ ${#ns[@]} -gt 0 ] || ns=(500 2000 5000)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
g++ -std=c++20 -O2 simgrid_probe.cc $(pkg-config --cflags --libs simgrid) \
  -o "$work/simgrid_probe"
(cd "$work" && apt-get download -qq libns3-dev && dpkg -x libns3-dev_*.deb dev)
g++ -std=c++17 -O2 ns3_probe.cc -I"$work/dev/usr/include" \
  -l:libns3-applications.so.37 -l:libns3-internet.so.37 \
  -l:libns3-point-to-point.so.37 -l:libns3-network.so.37 -l:libns3-core.so.37 \
  -o "$work/ns3_probe"
for n in "${ns[@]}"; do
  "$work/simgrid_probe" maestro "$n" | tee "$out/simgrid$n.txt"
  /usr/bin/time -v "$work/ns3_probe" "$n" >"$out/out$n.txt" \
    2>"$out/time$n.txt"
  cat "$out/out$n.txt"
done
