#!/usr/bin/env bash
# FUSE data-path benchmark: sroute-fuse against the raw backing directory,
# mergerfs (cache.files=off and partial) and libfuse's passthrough_ll
# (cache=never and default), alternated round by round over the same backing
# files. Prints one line per (system, workload) with the median over rounds
# of IOPS or MB/s, p50/p99 completion latency and the daemon's CPU use.
# The backing directory is a journaled ext4 loop filesystem made for the
# benchmark (DESIGN.md §11). "meta20k" creates, stats and unlinks 20000
# files (bench/metaops.c); its IOPS column is metadata ops/s. Before each
# warm read run the script prints how much of the file the page cache holds
# (fincore), since a reclaimer may evict it.
#
#   sudo bench/fuse_fio.sh                 # 3 rounds, 10 s per run
#   ROUNDS=1 RUNTIME=3 bench/fuse_fio.sh   # a quick look
#   SYSTEMS="raw sroute-off mergerfs-off" WORKLOADS="randread4k-1" bench/fuse_fio.sh
#
# Needs root, fio, mergerfs, a C compiler and build/fuse/sroute-fuse.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
work=${WORK:-/tmp/sroute-bench}
rounds=${ROUNDS:-3}
runtime=${RUNTIME:-10}
size=${SIZE:-1g}
systems=${SYSTEMS:-"raw sroute-off sroute-auto sroute-off-1000rules sroute-off-1000rules-match mergerfs-off mergerfs-partial ptll-never ptll-default"}
workloads=${WORKLOADS:-"randread4k-1 randread4k-4 randwrite4k-1 seqread128k-1 seqwrite128k-1 meta20k"}
sroute_fuse=${SROUTE_FUSE:-$top/build/fuse/sroute-fuse}

mkdir -p "$work/data" "$work/mnt" "$work/bin"
data=$work/data
mnt=$work/mnt

# The journaled ext4 loop filesystem that backs every system.
if ! mountpoint -q "$data"; then
  [ -f "$work/ext4.img" ] || {
    truncate -s 4G "$work/ext4.img"
    mkfs.ext4 -q -F -j "$work/ext4.img"
  }
  mount -o loop "$work/ext4.img" "$data"
fi

metaops=$work/bin/metaops
[ -x "$metaops" ] || cc -O2 -Wall -o "$metaops" "$top/bench/metaops.c"

# libfuse's low-level passthrough example, built from Debian's copy.
ptll=$work/bin/passthrough_ll
if [ ! -x "$ptll" ]; then
  src=/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c
  [ -f "$src.gz" ] && { gunzip -c "$src.gz" > "$work/bin/passthrough_ll.c"; src=$work/bin/passthrough_ll.c; }
  cc -O2 -Wall -o "$ptll" "$src" $(pkg-config fuse3 --cflags --libs)
fi

# 1000 rules that never match the benchmark file, and the same plus one
# that matches it (routing it to itself).
rules_none=$work/none.rules
rules_match=$work/match.rules
if [ ! -f "$rules_none" ]; then
  for i in $(seq 1000); do
    echo "<*, *, //home/elsewhere/dir$i/*> -> <IO, //home/moved/dir$i/*>"
  done > "$rules_none"
  { echo "<*, r|w, //home/fio.dat> -> <IO, //home/fio.dat>"; cat "$rules_none"; } > "$rules_match"
fi

daemon_pid=""
mount_system() {
  local sys=$1
  daemon_pid=""
  case $sys in
    raw) return 0 ;;
    sroute-off) "$sroute_fuse" "$mnt" --backing "$data" --kernel-cache off -f & ;;
    sroute-auto) "$sroute_fuse" "$mnt" --backing "$data" --kernel-cache auto -f & ;;
    sroute-off-1000rules)
      "$sroute_fuse" "$mnt" --backing "$data" --kernel-cache off --rules "$rules_none" -f & ;;
    sroute-off-1000rules-match)
      "$sroute_fuse" "$mnt" --backing "$data" --kernel-cache off --rules "$rules_match" -f & ;;
    mergerfs-off)
      mergerfs -f -o cache.files=off,dropcacheonclose=true,category.create=ff "$data" "$mnt" & ;;
    mergerfs-partial)
      mergerfs -f -o cache.files=partial,dropcacheonclose=true,category.create=ff "$data" "$mnt" & ;;
    ptll-never) "$ptll" -f -o cache=never,source="$data" "$mnt" & ;;
    ptll-default) "$ptll" -f -o source="$data" "$mnt" & ;;
    *) echo "unknown system $sys" >&2; exit 2 ;;
  esac
  daemon_pid=$!
  for _ in $(seq 200); do mountpoint -q "$mnt" && return 0; sleep 0.05; done
  echo "$sys did not mount" >&2; exit 1
}

unmount_system() {
  if [ -n "$daemon_pid" ]; then
    fusermount3 -u "$mnt" || umount -l "$mnt" || true
    wait "$daemon_pid" 2>/dev/null || true
    daemon_pid=""
  fi
}
trap unmount_system EXIT

cpu_ticks() {  # utime+stime of the daemon, in clock ticks
  [ -n "$daemon_pid" ] || { echo 0; return; }
  awk '{print $14 + $15}' "/proc/$daemon_pid/stat"
}

run_meta() {  # dir -> "ops 0 p50_us p99_us cpu_pct"
  local dir=$1/meta before after t0 t1 out hz=$(getconf CLK_TCK)
  mkdir -p "$dir"
  before=$(cpu_ticks)
  t0=$(date +%s.%N)
  out=$("$metaops" "$dir" 20000)
  t1=$(date +%s.%N)
  after=$(cpu_ticks)
  rmdir "$dir"
  set -- $out
  python3 -c "print(f'$1 0 $2 $3 {($after-$before)/$hz/($t1-$t0)*100:.0f}')"
}

run_fio() {  # system workload -> "iops mbps p50_us p99_us cpu_pct"
  local dir=$1 wl=$2 rw bs jobs
  if [ "$wl" = meta20k ]; then run_meta "$dir"; return; fi
  case $wl in
    randread4k-1) rw=randread bs=4k jobs=1 ;;
    randread4k-4) rw=randread bs=4k jobs=4 ;;
    randwrite4k-1) rw=randwrite bs=4k jobs=1 ;;
    seqread128k-1) rw=read bs=128k jobs=1 ;;
    seqwrite128k-1) rw=write bs=128k jobs=1 ;;
  esac
  local before after hz=$(getconf CLK_TCK)
  before=$(cpu_ticks)
  fio --name="$wl" --filename="$dir/fio.dat" --size="$size" --rw="$rw" \
    --bs="$bs" --numjobs="$jobs" --ioengine=psync --iodepth=1 \
    --time_based --runtime="$runtime" --group_reporting \
    --output-format=json > "$work/out.json" 2>/dev/null
  after=$(cpu_ticks)
  python3 - "$work/out.json" "$before" "$after" "$hz" "$runtime" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
d = j["read"] if j["read"]["io_bytes"] > 0 else j["write"]
pct = d["clat_ns"].get("percentile", {})
p50 = pct.get("50.000000", 0) / 1000
p99 = pct.get("99.000000", 0) / 1000
cpu = (int(sys.argv[3]) - int(sys.argv[2])) / int(sys.argv[4]) / float(sys.argv[5]) * 100
print(f'{d["iops"]:.0f} {d["bw_bytes"]/1e6:.1f} {p50:.1f} {p99:.1f} {cpu:.0f}')
PY
}

# The benchmark file, written once through the raw directory.
if [ ! -f "$data/fio.dat" ]; then
  fio --name=prep --filename="$data/fio.dat" --size="$size" --rw=write \
    --bs=1m --ioengine=psync > /dev/null
fi

results=$work/results.txt
: > "$results"
for round in $(seq "$rounds"); do
  for sys in $systems; do
    mount_system "$sys"
    dir=$mnt
    [ "$sys" = raw ] && dir=$data
    for wl in $workloads; do
      # Warm: read the file once so the page cache holds it where it can.
      cat "$dir/fio.dat" > /dev/null
      echo "# $round $sys $wl: page cache holds $(fincore -n -o RES "$data/fio.dat" | tr -d ' ') of $size" >&2
      echo "$round $sys $wl $(run_fio "$dir" "$wl")" >> "$results"
    done
    unmount_system
  done
done

python3 - "$results" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r, sys_, wl, iops, mbps, p50, p99, cpu = line.split()
    rows[(wl, sys_)].append((float(iops), float(mbps), float(p50), float(p99), float(cpu)))
raw = {}
print(f'{"workload":16} {"system":28} {"IOPS":>9} {"MB/s":>8} {"p50us":>7} {"p99us":>7} {"cpu%":>5} {"vs raw":>7}')
for (wl, s), v in sorted(rows.items()):
    med = [statistics.median(x) for x in zip(*v)]
    if s == "raw": raw[wl] = med[0]
for (wl, s), v in sorted(rows.items()):
    med = [statistics.median(x) for x in zip(*v)]
    ratio = med[0] / raw[wl] if raw.get(wl) else float("nan")
    print(f'{wl:16} {s:28} {med[0]:9.0f} {med[1]:8.1f} {med[2]:7.1f} {med[3]:7.1f} {med[4]:5.0f} {ratio:7.2f}')
PY
